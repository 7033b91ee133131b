//! The checks of programs that copy or fetch: where they write, and the commands
//! their options run (rsync, ssh/scp, curl, wget, tee, dd).

use super::options::*;
use super::*;

pub(super) fn rsync(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "eBfT",
        &[
            "rsh",
            "rsync-path",
            "filter",
            "log-file",
            "write-batch",
            "only-write-batch",
            "temp-dir",
        ],
    );
    if short(&items, 'e').next().is_some() {
        f.arg("rsync -e");
    }
    long_hazards(
        &items,
        &["rsh", "rsync-path", "write-batch", "only-write-batch"],
        "rsync",
        f,
    );
    for v in long(&items, "log-file") {
        if v.is_none_or(|v| a.outside_text(v)) {
            f.arg("rsync --log-file outside the workspace");
        }
    }
}

pub(super) fn ssh(a: &Args<'_>, f: &mut Findings) {
    const RUNS: &[&str] = &[
        "proxycommand",
        "localcommand",
        "permitlocalcommand",
        "knownhostscommand",
        "pkcs11provider",
        "securitykeyprovider",
        "include",
        "match",
    ];
    let items = parse(a.words, "bcDEeFIiJLlmOopQRSWwBPX", &[]);
    for v in short(&items, 'o') {
        let key = v
            .split(['=', ' ', '\t'])
            .next()
            .unwrap_or(v)
            .to_ascii_lowercase();
        if RUNS.contains(&key.as_str()) || v.contains('$') {
            f.arg(format!(
                "{} -o {}",
                a.prog,
                v.split(['=', ' ']).next().unwrap_or(v)
            ));
        }
    }
    if short(&items, 'F').next().is_some() {
        f.arg(format!("{} -F", a.prog));
    }
    if short(&items, 'I').next().is_some() && a.prog == "ssh" {
        f.arg("ssh -I");
    }
    if short(&items, 'S').next().is_some() && a.prog != "ssh" {
        f.arg(format!("{} -S", a.prog));
    }
}

pub(super) fn curl(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "AbcCdDeEFHKmoPQrTtuUwxXyYz",
        &[
            "output",
            "output-dir",
            "dump-header",
            "cookie-jar",
            "trace",
            "trace-ascii",
            "libcurl",
            "stderr",
            "etag-save",
            "hsts",
            "alt-svc",
            "config",
            "write-out",
            "engine",
            "header",
            "data",
            "user",
            "url",
            "request",
            "user-agent",
            "referer",
            "cookie",
            "form",
            "proxy",
            "upload-file",
            "max-time",
            "connect-timeout",
            "data-raw",
            "data-binary",
            "json",
        ],
    );
    let outputs = short(&items, 'o')
        .chain(short(&items, 'D'))
        .chain(short(&items, 'c'))
        .chain(
            [
                "output",
                "output-dir",
                "dump-header",
                "cookie-jar",
                "trace",
                "trace-ascii",
                "libcurl",
                "stderr",
                "etag-save",
                "hsts",
                "alt-svc",
            ]
            .iter()
            .flat_map(|l| long(&items, l).map(|v| v.unwrap_or(""))),
        );
    if outputs
        .collect::<Vec<_>>()
        .iter()
        .any(|o| a.outside_text(o) || o.contains('$'))
    {
        f.arg("curl writes outside the workspace");
    }
    if short(&items, 'K').next().is_some() || has_long(&items, "config") {
        f.arg("curl --config");
    }
    long_hazards(&items, &["engine"], "curl", f);
    let write_out = short(&items, 'w').chain(long(&items, "write-out").map(|v| v.unwrap_or("")));
    if write_out
        .collect::<Vec<_>>()
        .iter()
        .any(|w| w.contains("%output{"))
    {
        f.arg("curl --write-out %output");
    }
}

pub(super) fn wget(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "aABDeiIlOoPQRtTUwX",
        &[
            "output-document",
            "output-file",
            "append-output",
            "directory-prefix",
            "save-cookies",
            "warc-file",
            "execute",
            "config",
            "use-askpass",
            "rejected-log",
            "input-file",
            "user-agent",
            "header",
            "tries",
            "timeout",
            "user",
            "password",
        ],
    );
    let outputs = short(&items, 'O')
        .chain(short(&items, 'o'))
        .chain(short(&items, 'a'))
        .chain(short(&items, 'P'))
        .chain(
            [
                "output-document",
                "output-file",
                "append-output",
                "directory-prefix",
                "save-cookies",
                "warc-file",
                "rejected-log",
            ]
            .iter()
            .flat_map(|l| long(&items, l).map(|v| v.unwrap_or(""))),
        );
    if outputs
        .collect::<Vec<_>>()
        .iter()
        .any(|o| a.outside_text(o) || o.contains('$'))
    {
        f.arg("wget writes outside the workspace");
    }
    if short(&items, 'e').next().is_some() {
        f.arg("wget -e");
    }
    long_hazards(&items, &["execute", "config", "use-askpass"], "wget", f);
}

pub(super) fn tee(a: &Args<'_>, f: &mut Findings) {
    let items = parse(a.words, "", &[]);
    if operands(&items).any(|w| a.outside(Some(w))) {
        f.arg("tee writes outside the workspace");
    }
}

pub(super) fn dd(a: &Args<'_>, f: &mut Findings) {
    for w in a.words {
        if let Some(of) = w.text.strip_prefix("of=")
            && (!w.literal() || a.outside_text(of))
        {
            f.arg("dd of= outside the workspace");
        }
    }
}
