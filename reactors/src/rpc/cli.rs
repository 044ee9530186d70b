//! rpc.py's reactor and thread subcommands for `pmio-rpc` (feature `cli`). None of these
//! methods takes parameters: each subcommand is the bare call, printed as rpc.py prints it.

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};

/// The reactors' subcommands.
#[derive(Subcommand, Debug)]
pub enum ReactorsCommand {
    /// Reactor statistics (busy/idle ticks, interrupt mode, threads).
    #[command(name = "framework_get_reactors")]
    FrameworkGetReactors,
    /// Per-thread statistics (one thread per reactor).
    #[command(name = "thread_get_stats")]
    ThreadGetStats,
    /// Every reactor's pollers with their run and busy counts.
    #[command(name = "thread_get_pollers")]
    ThreadGetPollers,
}

impl ReactorsCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Request {
        let method = match self {
            ReactorsCommand::FrameworkGetReactors => "framework_get_reactors",
            ReactorsCommand::ThreadGetStats => "thread_get_stats",
            ReactorsCommand::ThreadGetPollers => "thread_get_pollers",
        };
        Request::bare(method, Print::Dict)
    }
}
