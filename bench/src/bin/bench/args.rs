//! The driver's command line: `table`'s arguments and the `--key value` pairs.

use super::*;

/// What `table` measures against.
pub(super) struct Args {
    pub never: PathBuf,
    pub always: PathBuf,
    pub echo: PathBuf,
    pub relay: PathBuf,
    pub rg: Option<PathBuf>,
    pub fd: Option<PathBuf>,
    pub secs: f64,
    pub pattern: String,
    /// What the search corpus is (for the table's note).
    pub corpus: String,
    /// The MCP side by side (issue 15), from `scripts/bench_mcp.mjs`.
    pub mcp: McpSource,
    /// The guarantees the served workspaces run with (`toolvisor status`), for a note.
    pub guards: Option<String>,
    /// The journal and build rows' inputs.
    pub costs: CostArgs,
}

pub(super) fn usage() -> String {
    "usage: toolvisor-bench table --never WS --always WS --echo SOCK --relay SOCK [--rg PATH] [--fd PATH] [--secs S] [--pattern RE] [--corpus TEXT] [--mcp FILE.json | --mcp-skip REASON] [--guards TEXT] [--small WS] [--build-crate DIR]\n       toolvisor-bench search --never WS [--rg PATH] [--fd PATH] [--pattern RE] [--corpus TEXT]   (grep, glob, ping under grep)\n       toolvisor-bench mcp --mcp FILE.json   (the MCP rows alone)\n       toolvisor-bench lat --socket SOCK --op ping|read|ls|write|edit|true|echo-ping|echo-call [--path FILE] [--clients N] [--secs S] [--gap-ms MS]\n       toolvisor-bench spawn [--secs S] [--shell sh|bash]".into()
}

/// The arguments of `table` (and of `search`, which needs only `--never`).
pub(super) fn table_args(m: &HashMap<String, String>, servers: bool) -> Result<Args, String> {
    let path = |k: &str| -> Result<PathBuf, String> {
        match m.get(k) {
            Some(v) => Ok(PathBuf::from(v)),
            None if !servers => Ok(PathBuf::new()),
            None => Err(format!("--{k} is required\n{}", usage())),
        }
    };
    let opt = |k: &str| m.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let text = |k: &str, d: &str| m.get(k).cloned().unwrap_or_else(|| d.into());
    Ok(Args {
        never: path("never")?,
        always: path("always")?,
        echo: path("echo")?,
        relay: path("relay")?,
        rg: opt("rg"),
        fd: opt("fd"),
        secs: m
            .get("secs")
            .map_or(Ok(3.0), |v| v.parse().map_err(|e| format!("--secs: {e}")))?,
        pattern: text("pattern", "unsafe fn"),
        corpus: text("corpus", "the workspace's corpus/"),
        mcp: match (m.get("mcp"), m.get("mcp-skip")) {
            (Some(f), _) => McpSource::File(PathBuf::from(f)),
            (None, Some(why)) => McpSource::Skipped(why.clone()),
            (None, None) => McpSource::None,
        },
        guards: m.get("guards").cloned(),
        costs: CostArgs {
            small: opt("small"),
            crate_dir: opt("build-crate"),
        },
    })
}

/// `--key value` pairs after the subcommand.
pub(super) fn pairs() -> Result<(String, HashMap<String, String>), String> {
    let mut it = std::env::args().skip(1);
    let cmd = it.next().ok_or_else(usage)?;
    let mut m = HashMap::new();
    while let Some(k) = it.next() {
        let key = k
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected {k}\n{}", usage()))?;
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        m.insert(key.to_owned(), v);
    }
    Ok((cmd, m))
}
