//! What a load did (or `--check-config` says it would do), call by call: created, set, mapped,
//! ignored, refused.

use serde_json::{Value, json};

/// The fate of one call (or one key of a setting, or one section).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// An object is created.
    Create,
    /// An existing object's setting is changed (pmio's own methods).
    Set,
    /// A setting maps onto pmio (or asks for what pmio does anyway).
    Map,
    /// Accepted, changes nothing.
    Ignore,
    /// Stops the load.
    Refuse,
}

impl Verdict {
    /// The word the report prints.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Create => "create",
            Verdict::Set => "set",
            Verdict::Map => "map",
            Verdict::Ignore => "ignore",
            Verdict::Refuse => "refuse",
        }
    }

    /// The member of `load_config`'s result listing these.
    fn key(self) -> &'static str {
        match self {
            Verdict::Create => "created",
            Verdict::Set => "set",
            Verdict::Map => "mapped",
            Verdict::Ignore => "ignored",
            Verdict::Refuse => "refused",
        }
    }
}

/// One line of a report.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// What happens.
    pub verdict: Verdict,
    /// Where in the document (`subsystems[5] (bdev) config[4]`).
    pub origin: String,
    /// The method (`-` for a section).
    pub method: String,
    /// The object or the reason.
    pub text: String,
}

impl Line {
    /// `origin: method text` (`origin: text` for a section).
    pub fn describe(&self) -> String {
        if self.method == "-" {
            format!("{}: {}", self.origin, self.text)
        } else {
            format!("{}: {} {}", self.origin, self.method, self.text)
        }
    }
}

/// A load's lines, in document order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Every line.
    pub lines: Vec<Line>,
}

impl Report {
    /// Adds a line.
    pub fn push(&mut self, verdict: Verdict, origin: &str, method: &str, text: impl Into<String>) {
        self.lines.push(Line {
            verdict,
            origin: origin.to_string(),
            method: method.to_string(),
            text: text.into(),
        });
    }

    /// Lines with `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.lines.iter().filter(|l| l.verdict == verdict).count()
    }

    /// The refusals.
    pub fn refusals(&self) -> impl Iterator<Item = &Line> {
        self.lines.iter().filter(|l| l.verdict == Verdict::Refuse)
    }

    /// `{"created": [...], "set": [...], "mapped": [...], "ignored": [...]}`: each line as
    /// `method: text` (`load_config`'s result).
    pub fn to_json(&self) -> Value {
        let mut out = json!({});
        for v in [
            Verdict::Create,
            Verdict::Set,
            Verdict::Map,
            Verdict::Ignore,
            Verdict::Refuse,
        ] {
            let items: Vec<Value> = self
                .lines
                .iter()
                .filter(|l| l.verdict == v)
                .map(|l| json!(format!("{}: {}", l.method, l.text)))
                .collect();
            if !items.is_empty() || v != Verdict::Refuse {
                out[v.key()] = Value::Array(items);
            }
        }
        out
    }

    /// One line per entry, aligned, then the totals.
    pub fn render(&self) -> String {
        let mw = self.lines.iter().map(|l| l.method.len()).max().unwrap_or(0);
        let mut out = String::new();
        for l in &self.lines {
            out.push_str(&format!(
                "{:<7} {:<mw$}  {}  [{}]\n",
                l.verdict.word(),
                l.method,
                l.text,
                l.origin
            ));
        }
        out.push_str(&self.totals());
        out.push('\n');
        out
    }

    /// `3 to create, 1 to set, 5 mapped, 9 ignored, 0 refused`.
    pub fn totals(&self) -> String {
        format!(
            "{} to create, {} to set, {} mapped, {} ignored, {} refused",
            self.count(Verdict::Create),
            self.count(Verdict::Set),
            self.count(Verdict::Map),
            self.count(Verdict::Ignore),
            self.count(Verdict::Refuse)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_text() {
        let mut r = Report::default();
        r.push(Verdict::Create, "o1", "bdev_null_create", "bdev N");
        r.push(Verdict::Ignore, "o2", "iobuf_set_options", "no pool");
        assert_eq!(
            r.to_json(),
            json!({"created": ["bdev_null_create: bdev N"], "set": [], "mapped": [],
                "ignored": ["iobuf_set_options: no pool"]})
        );
        let t = r.render();
        assert!(
            t.starts_with("create  bdev_null_create   bdev N  [o1]\n"),
            "{t}"
        );
        assert!(t.ends_with("0 refused\n"), "{t}");
    }
}
