//! What a command-line client sends for one subcommand and how it prints the answer, as SPDK's
//! rpc.py does. A module that declares its methods' parameters also builds its `pmio-rpc`
//! subcommands' requests from the same declarations (its `cli` feature), with these types.

use serde::Serialize;
use serde_json::Value;

/// How rpc.py prints a method's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Print {
    /// `print_dict`: indent-2 JSON.
    Dict,
    /// `print_json`: indent-2 JSON with surrounding quotes stripped (strings print bare).
    Json,
    /// `print_array`: elements space-separated.
    Array,
    /// Nothing (delete/detach/kill return `true`).
    Nothing,
    /// Text made from the result by the module's formatter (pmio's own views, such as
    /// `bdev_get_histogram --table`); an `Err` is printed as an error.
    Text(TextFormat),
}

/// A formatter of a method's result for [`Print::Text`].
#[derive(Clone, Copy, Debug)]
pub struct TextFormat(pub fn(&Value) -> Result<String, String>);

impl PartialEq for TextFormat {
    /// Formatters are told apart by address: the same function is the same format.
    fn eq(&self, o: &TextFormat) -> bool {
        std::ptr::fn_addr_eq(self.0, o.0)
    }
}

impl Eq for TextFormat {}

/// One call a subcommand makes.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Method name.
    pub method: &'static str,
    /// Parameters (`None`: the request carries no `params`).
    pub params: Option<Value>,
    /// How the result is printed.
    pub print: Print,
}

impl Request {
    /// A request for `method` with `params` serialized from the method's declaration.
    pub fn new(method: &'static str, params: &impl Serialize, print: Print) -> Request {
        // Declarations are plain structs of strings, numbers, booleans and lists: they always
        // serialize.
        let params = serde_json::to_value(params).expect("parameters serialize to JSON");
        Request {
            method,
            params: Some(params),
            print,
        }
    }

    /// A request for a method whose keys are all optional: with `params` serialized from the
    /// declaration, or none when it has no key set (rpc.py sends no `params` then).
    pub fn new_or_bare(method: &'static str, params: &impl Serialize, print: Print) -> Request {
        match Request::new(method, params, print) {
            Request {
                params: Some(Value::Object(m)),
                ..
            } if m.is_empty() => Request::bare(method, print),
            r => r,
        }
    }

    /// The method, parameters and printing style, in that order.
    pub fn into_parts(self) -> (&'static str, Option<Value>, Print) {
        (self.method, self.params, self.print)
    }

    /// A request for a method that takes no parameters.
    pub fn bare(method: &'static str, print: Print) -> Request {
        Request {
            method,
            params: None,
            print,
        }
    }
}

/// rpc.py's `(total_size * 1024 * 1024) // block_size`: a size in MiB as a block count.
pub fn mib_to_blocks(total_mib: f64, block_size: u64) -> Result<u64, String> {
    if block_size == 0 {
        return Err("block_size must not be 0".into());
    }
    if !(total_mib.is_finite() && total_mib >= 0.0) {
        return Err(format!("invalid total_size {total_mib}"));
    }
    Ok(((total_mib * 1024.0 * 1024.0) as u64) / block_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_keys_only_with_a_value_give_params() {
        #[derive(Serialize)]
        struct Query {
            #[serde(skip_serializing_if = "Option::is_none")]
            name: Option<String>,
        }
        let none = Request::new_or_bare("q", &Query { name: None }, Print::Dict);
        assert_eq!(none, Request::bare("q", Print::Dict));
        let one = Request::new_or_bare(
            "q",
            &Query {
                name: Some("a".into()),
            },
            Print::Dict,
        );
        assert_eq!(one.params, Some(serde_json::json!({"name": "a"})));
    }

    #[test]
    fn sizes_as_rpc_py_computes_them() {
        assert_eq!(mib_to_blocks(64.0, 512), Ok(131072));
        assert_eq!(mib_to_blocks(0.5, 4096), Ok(128));
        assert!(mib_to_blocks(1.0, 0).is_err());
        assert!(mib_to_blocks(f64::NAN, 512).is_err());
    }
}
