//! The hazard table: each program whose arguments can run code or write files, what
//! asks in it (in words, as docs/POLICY.md lists it) and the check that finds it. Add
//! a program by adding a row here (and a line to that document).

use super::{Args, Findings, git, programs, text, tools, transfer};

/// A program whose arguments can run code or write files.
pub struct Program {
    /// The names it goes by (its last path component is compared).
    pub names: &'static [&'static str],
    /// What asks, in words (docs/POLICY.md shows the same list). Read by people, not
    /// by code.
    #[allow(dead_code)]
    pub summary: &'static str,
    pub(super) check: fn(&Args<'_>, &mut Findings),
}

/// The argument hazards per program.
pub static PROGRAMS: &[Program] = &[
    Program {
        names: &["git"],
        summary: "-c, --config-env, --exec-path=, --git-dir, -C/--work-tree outside the workspace, \
                  --upload-pack, --receive-pack, -u (clone, ls-remote), --exec, --extcmd, \
                  -x/--exec (rebase), --output, -o (format-patch, archive), -O (grep), \
                  --template, the send-email/instaweb/daemon command options, an ext:: URL, \
                  `config` that writes, filter-branch, submodule foreach, bisect run, \
                  difftool, mergetool, instaweb, remote-ext",
        check: git::git,
    },
    Program {
        names: &["find"],
        summary: "-exec, -execdir, -ok, -okdir, -fprint, -fprint0, -fprintf, -fls, -delete",
        check: programs::find,
    },
    Program {
        names: &["xargs"],
        summary: "a command that runs code or has argument hazards (its input becomes arguments)",
        check: programs::xargs,
    },
    Program {
        names: &["awk", "gawk", "mawk", "nawk", "busybox-awk"],
        summary: "system(), output redirection or pipes of print/printf, getline from a command, \
                  -f/-E program files, -i/-l includes, a program known only at run time \
                  (read as awk parses it: `find -name '*exec*'` or `gsub(/e/, \"E\")` is fine)",
        check: text::awk_check,
    },
    Program {
        names: &["sed", "gsed"],
        summary: "the e command or flag, w/W to a file, -f script files, -i outside the \
                  workspace, a script known only at run time (as sed parses it: `s/e/E/` is fine)",
        check: text::sed_check,
    },
    Program {
        names: &["sort"],
        summary: "--compress-program, -o/--output outside the workspace",
        check: text::sort,
    },
    Program {
        names: &["uniq"],
        summary: "an output file outside the workspace",
        check: text::uniq,
    },
    Program {
        names: &["tar", "gtar", "bsdtar"],
        summary: "--checkpoint-action, --to-command, -I/--use-compress-program, \
                  -F/--info-script/--new-volume-script, --rsh-command, -P/--absolute-names, \
                  -x into a directory outside the workspace, an archive outside the workspace \
                  or on a remote host",
        check: text::tar,
    },
    Program {
        names: &["env"],
        summary: "-S/--split-string; variables of the environment table; the command it runs \
                  is decided as a part of its own",
        check: programs::env,
    },
    Program {
        names: &["cargo"],
        summary: "--config, install/uninstall, --manifest-path, --target-dir, -C outside the workspace",
        check: programs::cargo,
    },
    Program {
        names: &["make", "gmake"],
        summary: "-f/--file/--makefile, --eval/-E, variable overrides (`CC=…`), \
                  -C/-I outside the workspace",
        check: programs::make,
    },
    Program {
        names: &["rsync"],
        summary: "-e/--rsh, --rsync-path, --write-batch, --only-write-batch, --log-file",
        check: transfer::rsync,
    },
    Program {
        names: &["ssh", "scp", "sftp"],
        summary: "-o ProxyCommand/LocalCommand/KnownHostsCommand/PKCS11Provider/…, -F, -I, -S (scp)",
        check: transfer::ssh,
    },
    Program {
        names: &["curl"],
        summary: "output files outside the workspace (-o, --output-dir, -D, -c, --trace, \
                  --libcurl, --stderr, --etag-save, --hsts, --alt-svc, -w %output{…}), \
                  -K/--config, --engine",
        check: transfer::curl,
    },
    Program {
        names: &["wget"],
        summary: "output files outside the workspace (-O, -o, -a, -P, --save-cookies, \
                  --warc-file), -e/--execute, --config, --use-askpass",
        check: transfer::wget,
    },
    Program {
        names: &["tee"],
        summary: "a file outside the workspace",
        check: transfer::tee,
    },
    Program {
        names: &["dd"],
        summary: "of= outside the workspace",
        check: transfer::dd,
    },
    Program {
        names: &["rg"],
        summary: "--pre (runs a preprocessor command)",
        check: tools::rg,
    },
    Program {
        names: &["fd", "fdfind"],
        summary: "-x/--exec, -X/--exec-batch",
        check: tools::fd,
    },
    Program {
        names: &["zip"],
        summary: "-TT/--unzip-command",
        check: tools::zip,
    },
    Program {
        names: &["man"],
        summary: "-P/--pager, -H/--html",
        check: tools::man,
    },
    Program {
        names: &["less", "more"],
        summary: "+commands",
        check: tools::less,
    },
    Program {
        names: &["vi", "vim", "nvim", "view", "ex", "vimdiff"],
        summary: "+commands, -c, --cmd, -S, -u",
        check: tools::vim,
    },
    Program {
        names: &["emacs"],
        summary: "--eval, -l/--load, -f/--funcall, --script",
        check: tools::emacs,
    },
    Program {
        names: &["sqlite3"],
        summary: ".shell/.system, -init, -cmd",
        check: tools::sqlite,
    },
];
