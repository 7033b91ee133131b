//! Every row of the table, through the real walk: each hazard is found, and the
//! benign commands around it are not.

use super::options::*;
use super::*;
use crate::shell::analyze;

struct Ws;

impl Paths for Ws {
    fn outside(&self, p: &str) -> bool {
        p.starts_with('~')
            || p.contains('$')
            || p.contains("..")
            || p.starts_with('/') && !p.starts_with("/ws")
    }
}

fn found(cmd: &str) -> Vec<String> {
    analyze(cmd, &Ws)
        .all_hazards()
        .map(|h| h.name.clone())
        .collect()
}

#[test]
fn each_program_hazard_is_found() {
    let cases: &[(&str, &str)] = &[
        ("git -c alias.x='!touch M' x", "git -c"),
        ("git -calias.x=!y x", "git -c"),
        ("git --config-env=core.pager=X log", "git --config-env"),
        ("git --exec-path=/tmp log", "git --exec-path"),
        ("git --git-dir=/tmp/x status", "git --git-dir"),
        ("git -C /tmp/evil status", "git -C outside the workspace"),
        (
            "git --work-tree=/ status",
            "git --work-tree outside the workspace",
        ),
        (
            "git fetch --upload-pack='touch M' origin",
            "git --upload-pack",
        ),
        ("git fetch --upl=x origin", "git --upload-pack"),
        ("git push --receive-pack=x origin", "git --receive-pack"),
        ("git clone -u 'touch M' x y", "git clone -u"),
        ("git ls-remote -u x origin", "git ls-remote -u"),
        ("git clone -c core.fsmonitor=x a b", "git clone -c"),
        (
            "git clone --config core.fsmonitor=x a b",
            "git clone --config",
        ),
        ("git clone --template=/tmp/t a b", "git --template"),
        ("git archive --exec=x --remote=r HEAD", "git --exec"),
        ("git difftool --extcmd=x", "git --extcmd"),
        ("git rebase -x 'touch M' HEAD~1", "git rebase -x"),
        ("git rebase --exec 'touch M' HEAD~1", "git --exec"),
        ("git log --output=/tmp/x", "git --output"),
        ("git format-patch -o /tmp HEAD~1", "git format-patch -o"),
        (
            "git format-patch --output-directory /tmp HEAD~1",
            "git --output-directory",
        ),
        ("git archive -o x.tar HEAD", "git archive -o"),
        ("git grep -O'touch M' x", "git grep -O"),
        (
            "git grep --open-files-in-pager=x y",
            "git --open-files-in-pager",
        ),
        ("git clone 'ext::sh -c touch% M' x", "git ext:: URL"),
        ("git config alias.x '!touch M'", "git config"),
        ("git config --global core.pager x", "git config"),
        ("git config -e", "git config"),
        ("git filter-branch --tree-filter x", "git filter-branch"),
        ("git submodule foreach 'touch M'", "git submodule foreach"),
        ("git bisect run ./x", "git bisect run"),
        ("git difftool", "git difftool"),
        ("git mergetool", "git mergetool"),
        ("git send-email --sendmail-cmd=x p", "git --sendmail-cmd"),
        ("git instaweb --httpd=x", "git instaweb"),
        ("git remote-ext x 'sh -c y'", "git remote-ext"),
        (
            "git apply --unsafe-paths --directory=/ p.diff",
            "git --unsafe-paths",
        ),
        ("git $X status", "known only at run time"),
        ("git \"$SUB\"", "known only at run time"),
        ("find . -exec touch M \\;", "find -exec"),
        ("find . -execdir touch M +", "find -execdir"),
        ("find . -ok rm {} \\;", "find -ok"),
        ("find . -okdir rm {} \\;", "find -okdir"),
        ("find . -fprint /tmp/x", "find -fprint"),
        ("find . -fprintf x %p", "find -fprintf"),
        ("find . -fls x", "find -fls"),
        ("find . -delete", "find -delete"),
        ("find . -name $X", "known only at run time"),
        ("xargs sh -c 'x'", "xargs sh"),
        ("xargs git", "xargs git"),
        ("xargs -I{} {} x", "xargs {}"),
        ("awk 'BEGIN{system(\"touch M\")}'", "awk system()"),
        ("awk '{print | \"sh\"}'", "awk pipe"),
        ("awk 'BEGIN{\"id\" | getline}'", "awk pipe"),
        ("awk '{print > \"out\"}' f", "awk output redirection"),
        ("awk -f prog.awk f", "awk -f"),
        ("awk -E prog.awk f", "awk -E"),
        ("gawk -i inc 'BEGIN{}'", "gawk -i"),
        ("gawk -l ext 'BEGIN{}'", "gawk -l"),
        ("gawk --source='BEGIN{system(\"x\")}'", "gawk system()"),
        ("awk -o 'BEGIN{system(\"x\")}'", "awk system()"),
        ("awk \"$P\" f", "program known only at run time"),
        ("mawk -W exec x", "mawk -W"),
        ("sed e", "sed e (runs a command)"),
        ("sed '1e touch M' f", "sed e (runs a command)"),
        ("sed 's/x/touch M/e' f", "sed e (runs a command)"),
        ("sed -n 's/x/y/w out' f", "sed w (writes a file)"),
        ("sed '1w /tmp/x' f", "sed w (writes a file)"),
        ("sed -f s.sed f", "sed -f"),
        ("sed -e 's/a/b/' -e 'e id' f", "sed e (runs a command)"),
        ("sed --expression='e id' f", "sed e (runs a command)"),
        ("sed -i.ex 's/x/y/;e touch M' f", "sed e (runs a command)"),
        ("sed -i s/a/b/ /etc/passwd", "sed -i outside the workspace"),
        ("sed \"s/a/$X/\" f", "script known only at run time"),
        ("sed 's/a/b' f", "sed script not understood"),
        ("sort --compress-program=x f", "sort --compress-program"),
        ("sort --compress=x f", "sort --compress-program"),
        ("sort -o /tmp/x f", "sort -o outside the workspace"),
        ("sort -uo/tmp/x f", "sort -o outside the workspace"),
        ("sort --output=../x f", "sort -o outside the workspace"),
        ("uniq in /tmp/out", "uniq output outside the workspace"),
        (
            "tar --checkpoint=1 --checkpoint-action=exec='touch M' -cf a.tar x",
            "tar --checkpoint-action",
        ),
        ("tar --to-command='touch M' -xf a.tar", "tar --to-command"),
        ("tar -I 'touch M' -cf a.tar x", "tar -I"),
        (
            "tar --use-compress-program=x -cf a.tar x",
            "tar --use-compress-program",
        ),
        ("tar -F x -cf a.tar x", "tar -F"),
        ("tar --info-script=x -cf a.tar x", "tar --info-script"),
        ("tar -P -xf a.tar", "tar -P"),
        ("tar -xf a.tar -C /", "tar -x outside the workspace"),
        ("tar xfC a.tar /etc", "tar -x outside the workspace"),
        (
            "tar -xf a.tar --directory=/tmp",
            "tar -x outside the workspace",
        ),
        ("tar -cf host:/x src", "tar remote archive"),
        (
            "tar -czf /tmp/out.tgz src",
            "tar writes outside the workspace",
        ),
        ("tar cIf x a.tar src", "tar -I"),
        ("tar --rsh-command=x -cf h:a src", "tar --rsh-command"),
        ("env -S 'touch M'", "env -S"),
        ("env --split-string='x y'", "env -S"),
        ("env PATH=/tmp ls", "sets PATH"),
        ("env GIT_SSH_COMMAND=x git fetch", "sets GIT_SSH_COMMAND"),
        (
            "cargo --config build.rustc-wrapper=x check",
            "cargo --config",
        ),
        ("cargo --config=x build", "cargo --config"),
        ("cargo install ripgrep", "cargo install"),
        (
            "cargo build --manifest-path /tmp/x/Cargo.toml",
            "cargo --manifest-path outside the workspace",
        ),
        (
            "cargo build --target-dir /tmp/t",
            "cargo --target-dir outside the workspace",
        ),
        ("make -f /tmp/Makefile", "make -f"),
        ("make --eval='x:=$(shell touch M)'", "make --eval"),
        ("make -E 'all: ; touch M'", "make --eval"),
        ("make CC='touch M' all", "make variable override"),
        ("make SHELL=/tmp/x", "make variable override"),
        ("make DEBUG='1; touch M'", "make variable override"),
        ("make X='$(shell touch M)'", "make variable override"),
        ("make MAKEFLAGS=x", "make variable override"),
        ("git config user.name x", "git config"),
        ("git config set user.name x", "git config"),
        ("make -C /tmp/evil", "make -C/-I outside the workspace"),
        ("make -kf x", "make -f"),
        ("rsync -e 'sh -c x' a b", "rsync -e"),
        ("rsync -avze x a b", "rsync -e"),
        ("rsync --rsh=x a b", "rsync --rsh"),
        ("rsync --rsync-path=x a h:b", "rsync --rsync-path"),
        ("ssh -o ProxyCommand='touch M' h", "ssh -o ProxyCommand"),
        ("ssh -oProxyCommand=x h", "ssh -o ProxyCommand"),
        (
            "ssh -o LocalCommand=x -o PermitLocalCommand=yes h",
            "ssh -o LocalCommand",
        ),
        ("ssh -F /tmp/cfg h", "ssh -F"),
        ("scp -o ProxyCommand=x a h:b", "scp -o ProxyCommand"),
        ("scp -S ./x a h:b", "scp -S"),
        (
            "curl -o /tmp/x https://e",
            "curl writes outside the workspace",
        ),
        (
            "curl -sSLo ~/.bashrc https://e",
            "curl writes outside the workspace",
        ),
        (
            "curl --output-dir /tmp -O https://e/x",
            "curl writes outside the workspace",
        ),
        (
            "curl -D /tmp/h https://e",
            "curl writes outside the workspace",
        ),
        ("curl -K cfg https://e", "curl --config"),
        (
            "curl -w '%output{/tmp/x}' https://e",
            "curl --write-out %output",
        ),
        (
            "wget -O /tmp/x https://e",
            "wget writes outside the workspace",
        ),
        (
            "wget -qO../x https://e",
            "wget writes outside the workspace",
        ),
        (
            "wget -P /tmp https://e",
            "wget writes outside the workspace",
        ),
        ("wget -e output_document=/tmp/x https://e", "wget -e"),
        ("wget --use-askpass=x https://e", "wget --use-askpass"),
        ("tee /tmp/x", "tee writes outside the workspace"),
        ("dd if=a of=/dev/sda", "dd of= outside the workspace"),
        ("rg --pre ./x pat", "rg --pre"),
        ("fd -x touch", "fd --exec"),
        ("zip -T -TT 'touch M' a.zip x", "zip --unzip-command"),
        ("man -P 'touch M' ls", "man --pager"),
        ("less '+!touch M' f", "less +command"),
        ("vim -c '!touch M'", "vim command"),
        ("sqlite3 x.db '.shell touch M'", "sqlite3 shell command"),
        ("watch ls", "watch runs its arguments in a shell"),
        ("sh -c 'touch M'", "sh -c"),
        ("bash -lc 'touch M'", "bash -c"),
        ("/bin/dash -c x", "dash -c"),
        ("zsh -c x", "zsh -c"),
        ("bash --rcfile x", "bash -c"),
        ("python3 -c 'import os'", "python inline code"),
        ("python3.12 -Ic 'x'", "python inline code"),
        ("perl -e 'system(1)'", "perl inline code"),
        ("perl -ne 'print'", "perl inline code"),
        ("perl '-Mstrict;system q(x)'", "perl inline code"),
        ("ruby -e 'x'", "ruby inline code"),
        ("node -e 'x'", "node inline code"),
        ("node --eval=x", "node inline code"),
        ("php -r 'x'", "php inline code"),
        ("lua -e 'x'", "lua inline code"),
        ("deno eval 'x'", "deno inline code"),
        ("cargo run -- bash -c 'touch M'", "bash -c in the arguments"),
        (
            "printf -v 'a[$(x)]' %s y",
            "a variable name with a subscript",
        ),
        ("read 'a[i]'", "a variable name with a subscript"),
        ("declare -n r=x", "declare -i/-n"),
        ("set -e -k", "set -k"),
        ("shopt -s extglob", "shopt extglob"),
        ("sudo env EDITOR=x git commit", "sets EDITOR"),
        ("printf -v PATH %s .", "sets PATH"),
        ("read -r PATH", "sets PATH"),
        ("BASH_CMDS[ls]=./x", "sets BASH_CMDS"),
        ("declare -A BASH_CMDS=([ls]=./x)", "sets BASH_CMDS"),
        ("PATH[0]=.", "sets PATH"),
        ("for PATH in .; do ls; done", "sets PATH"),
        ("echo ${BASH_CMDS[ls]:=./x}", "sets BASH_CMDS"),
        ("export PATH=.", "sets PATH"),
        ("local IFS=x", "sets IFS"),
    ];
    let mut missing = Vec::new();
    for (cmd, want) in cases {
        let h = found(cmd);
        if !h.iter().any(|x| x.contains(want)) {
            missing.push(format!("{cmd:?} → {h:?} (wanted {want:?})"));
        }
    }
    assert!(missing.is_empty(), "\n{}", missing.join("\n"));
}

#[test]
fn benign_uses_of_the_same_programs() {
    for cmd in [
        "git status",
        "git status --short",
        "git log --oneline -n 5",
        "git log --author=\"$USER\"",
        "git diff --stat HEAD~1",
        "git diff --output-indicator-new=+",
        "git -C sub status",
        "git -C . log -1",
        "git config --get user.name",
        "git config user.name",
        "git config -f .gitmodules --get-regexp path",
        "make DEBUG=1 V=1 all",
        "make \"OPTS=-O2 -g\"",
        "git config --list",
        "git config get user.email",
        "git commit -m 'fix: exec path'",
        "git stash show stash@{0}",
        "git push -o ci.skip origin main",
        "git clone -o upstream https://example.com/x.git",
        "git grep -n exec",
        "git log --format=%s",
        "git log -$((1 + 1))",
        "find . -name '*exec*'",
        "find src -type f -name '*.rs'",
        "find . -newer Cargo.toml",
        "awk '{print $1}' f",
        "awk -F, '{print $2}' data.csv",
        "awk '$1 > 2 {print}' f",
        "awk -v n=3 'NR <= n' f",
        "awk 'BEGIN{x=1} {x+=$1} END{print x}' f",
        "awk --sandbox 'BEGIN{print 1}'",
        "sed 's/e/E/' README.md",
        "sed -n '1,2p' f",
        "sed -i 's/a/b/g' src/x.rs",
        "sed -i.bak 's/a/b/' f",
        "sed -e 's/a/b/' -e 's/c/d/' f",
        "sed --sandbox 'e id'",
        "sed -E 's/(a|b)+/x/g' f",
        "sort -u f",
        "sort -k2 -t, f",
        "sort -o sorted.txt f",
        "sort -to f",
        "uniq f",
        "uniq -c in out",
        "tar -czf out.tgz src",
        "tar -tzf out.tgz",
        "tar -xzf a.tgz -C build",
        "tar xzf a.tgz",
        "env",
        "env -u HOME printenv",
        "env LANG=C ls",
        "cargo test --all",
        "cargo build --release",
        "cargo clippy --workspace -- -D warnings",
        "cargo run --bin x -- --flag",
        "make",
        "make -j4 all",
        "make -C sub",
        "rsync -av src/ dst/",
        "ssh -o StrictHostKeyChecking=no host uptime",
        "curl -sS https://example.com",
        "curl -o out.json https://example.com",
        "curl -O https://example.com/x",
        "wget -qO- https://example.com",
        "wget https://example.com/x",
        "cargo test 2>&1 | tee log.txt",
        "dd if=/dev/zero of=blob bs=1k count=1",
        "rg -n pattern src",
        "python3 script.py",
        "python3 -m pytest",
        "node build.js",
        "perl script.pl",
        "bash script.sh",
        "printf '%s\\n' a b",
        "printf -v out %s y",
        "read -r line",
        "echo done",
    ] {
        let h = found(cmd);
        assert!(h.is_empty(), "{cmd:?}: {h:?}");
    }
}

#[test]
fn environment_keys() {
    for key in [
        "PATH",
        "LD_PRELOAD",
        "BASH_ENV",
        "ENV",
        "GIT_DIR",
        "GIT_SSH_COMMAND",
        "EDITOR",
        "VISUAL",
        "PAGER",
        "GIT_PAGER",
        "LESSOPEN",
        "HOME",
        "XDG_CONFIG_HOME",
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "CARGO_HOME",
        "NODE_OPTIONS",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PERL5OPT",
        "PYTEST_ADDOPTS",
        "PYTEST_PLUGINS",
        "COVERAGE_PROCESS_START",
        "PYENV_VERSION",
        "RBENV_VERSION",
        "NODENV_VERSION",
        "ASDF_DATA_DIR",
        "MISE_DATA_DIR",
        "VOLTA_HOME",
        "NVM_DIR",
        "UV_PYTHON",
        "POETRY_VIRTUALENVS_PATH",
        "npm_config_script_shell",
        "NPM_CONFIG_SCRIPT_SHELL",
        "Npm_Config_Script_Shell",
        "JAVA_TOOL_OPTIONS",
        "MAVEN_OPTS",
        "MAVEN_ARGS",
        "RAKEOPT",
        "ERL_AFLAGS",
        "JULIA_DEPOT_PATH",
        "DOTNET_STARTUP_HOOKS",
        "CORECLR_PROFILER_PATH",
        "PUPPETEER_EXECUTABLE_PATH",
        "AWKLIBPATH",
        "GOPROXY",
        "PKG_CONFIG_PATH",
        "RUBYOPT",
        "PROMPT_COMMAND",
        "IFS",
        "SHELLOPTS",
        "BASHOPTS",
        "BASH_FUNC_ls%%",
        "MANPAGER",
        "SSH_ASKPASS",
        "MAKEFLAGS",
        "CC",
        "PS4",
    ] {
        assert!(is_env_hazard(key), "{key}");
    }
    for key in [
        "RUST_LOG",
        "LANG",
        "LC_ALL",
        "TERM",
        "CI",
        "FOO",
        "RUST_BACKTRACE",
        "TZ",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
        "NODE_ENV",
        "PYTHONUNBUFFERED",
        "npm_confi",
    ] {
        assert!(!is_env_hazard(key), "{key}");
    }
}

#[test]
fn options_parse_like_getopt() {
    let words: Vec<Word> = ["-uo/tmp/x", "-k", "2", "--output", "o", "f"]
        .iter()
        .map(|t| Word {
            text: (*t).into(),
            known: t.len(),
            splits: false,
            numeric: false,
            span: 0..0,
        })
        .collect();
    let items = parse(&words, "ko", &["output"]);
    assert_eq!(short(&items, 'o').collect::<Vec<_>>(), ["/tmp/x"]);
    assert_eq!(short(&items, 'k').collect::<Vec<_>>(), ["2"]);
    assert_eq!(long(&items, "output").collect::<Vec<_>>(), [Some("o")]);
    assert_eq!(
        operands(&items)
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>(),
        ["f"]
    );
    let items = parse_with(&words[..1], "", "u", &[]);
    assert_eq!(short(&items, 'u').collect::<Vec<_>>(), ["o/tmp/x"]);
}

#[test]
fn every_program_is_documented() {
    let doc = include_str!("../../../docs/POLICY.md");
    for p in PROGRAMS {
        for n in p.names {
            assert!(
                doc.contains(&format!("`{n}`")),
                "docs/POLICY.md does not name `{n}`"
            );
        }
    }
}
