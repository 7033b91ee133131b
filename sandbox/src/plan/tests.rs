use super::*;

fn names() -> Vec<PathBuf> {
    super::super::protect::names(&[PathBuf::from("deep/er/secret")])
}

struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new() -> Ws {
        // Not under /tmp: the plan treats paths there specially.
        let base = super::super::test_base();
        Ws {
            dir: tempfile::tempdir_in(base).unwrap(),
        }
    }
    fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }
    fn mkdir(&self, rel: &str) {
        std::fs::create_dir_all(self.root().join(rel)).unwrap();
    }
    fn touch(&self, rel: &str) {
        let p = self.root().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x").unwrap();
    }
}

fn run(ws: &Ws, read_only: &[PathBuf], hidden: &[PathBuf]) -> Vec<Step> {
    let roots = [ws.root()];
    let protected = names();
    let inputs = Inputs {
        roots: &roots,
        writable: &[],
        protected: &protected,
        read_only,
        hidden,
        network: false,
        home: None,
        stage: None,
        shown: &[],
        reveal: &[],
    };
    plan(&inputs, &HostView)
}

#[test]
fn git_is_pinned_and_its_config_and_hooks_are_read_only() {
    let ws = Ws::new();
    ws.touch(".git/config");
    ws.mkdir(".git/hooks");
    ws.touch(".envrc");
    ws.touch("deep/er/secret");
    let r = ws.root();
    let steps = run(&ws, &[], &[]);
    assert_eq!(steps[0], Step::Tmpfs(PRIVATE_TMP.into()));
    let pos = |s: &Step| {
        steps
            .iter()
            .position(|x| x == s)
            .unwrap_or_else(|| panic!("{s:?} in {steps:?}"))
    };
    let w = pos(&Step::Writable(r.clone()));
    let pin = pos(&Step::Pin(r.join(".git")));
    let cfg = pos(&Step::ReadOnly(r.join(".git/config")));
    assert!(w < pin && pin < cfg, "{steps:?}");
    pos(&Step::ReadOnly(r.join(".git/hooks")));
    pos(&Step::ReadOnly(r.join(".envrc")));
    pos(&Step::Pin(r.join("deep")));
    pos(&Step::Pin(r.join("deep/er")));
    pos(&Step::ReadOnly(r.join("deep/er/secret")));
    assert_eq!(steps.last(), Some(&Step::Proc));
    assert!(
        !steps.contains(&Step::ReadOnly(r.join(".vscode"))),
        "missing names get no step"
    );
}

#[test]
fn git_commondir_is_planted_as_the_repository_itself_and_read_only() {
    let ws = Ws::new();
    ws.touch(".git/config");
    ws.mkdir(".git/hooks");
    let r = ws.root();
    let steps = run(&ws, &[], &[]);
    let common = r.join(".git/commondir");
    let made = steps
        .iter()
        .position(|s| {
            *s == Step::MakeFile {
                path: common.clone(),
                content: ".\n",
            }
        })
        .expect("a missing commondir is made");
    let ro = steps
        .iter()
        .position(|s| *s == Step::ReadOnly(common.clone()))
        .expect("and made read-only");
    assert!(made < ro, "{steps:?}");
    // One that exists is covered as it is.
    ws.touch(".git/commondir");
    let steps = run(&ws, &[], &[]);
    assert!(steps.contains(&Step::ReadOnly(common.clone())));
    assert!(!steps.iter().any(|s| matches!(s, Step::MakeFile { .. })));
}

#[test]
fn missing_hooks_are_made_first_and_a_git_file_is_read_only() {
    let ws = Ws::new();
    ws.touch(".git/config");
    let r = ws.root();
    let steps = run(&ws, &[], &[]);
    let make = steps
        .iter()
        .position(|s| *s == Step::MakeDir(r.join(".git/hooks")))
        .expect("hooks made");
    let ro = steps
        .iter()
        .position(|s| *s == Step::ReadOnly(r.join(".git/hooks")))
        .expect("hooks read-only");
    assert!(make < ro);
    let ws2 = Ws::new();
    ws2.touch(".git");
    let steps = run(&ws2, &[], &[]);
    assert!(steps.contains(&Step::ReadOnly(ws2.root().join(".git"))));
    assert!(!steps.iter().any(|s| matches!(s, Step::MakeDir(_))));
}

#[test]
fn submodules_config_and_hooks_are_read_only() {
    let ws = Ws::new();
    ws.touch(".git/config");
    ws.mkdir(".git/hooks");
    ws.touch(".git/modules/lib/config");
    ws.mkdir(".git/modules/lib/hooks");
    ws.touch(".git/modules/a/b/config");
    let r = ws.root();
    let steps = run(&ws, &[], &[]);
    for p in [
        ".git/modules/lib/config",
        ".git/modules/lib/hooks",
        ".git/modules/a/b/config",
    ] {
        assert!(steps.contains(&Step::ReadOnly(r.join(p))), "{p}: {steps:?}");
    }
    assert!(steps.contains(&Step::Pin(r.join(".git/modules/a/b"))));
}

#[test]
fn hidden_and_config_paths() {
    let ws = Ws::new();
    ws.mkdir(".toolvisor/artifacts");
    ws.touch("conf/toolvisor.toml");
    let r = ws.root();
    let outside = Ws::new();
    outside.touch("state/toolvisor.sock");
    let hidden = [
        r.join(".toolvisor"),
        r.join(".toolvisor/toolvisor.sock"),
        outside.root().join("state/toolvisor.sock"),
        PathBuf::from("/tmp/toolvisor-abc.sock"),
        PathBuf::from("/run/user/0/toolvisor-abc.sock"),
    ];
    let ro = [
        r.join("conf/toolvisor.toml"),
        PathBuf::from("/etc/hostname"),
    ];
    let steps = run(&ws, &ro, &hidden);
    assert!(steps.contains(&Step::Hide {
        path: r.join(".toolvisor"),
        dir: true
    }));
    assert!(
        !steps.iter().any(|s| s.path() == Some(&hidden[1])),
        "under a hidden directory: nothing to do"
    );
    assert!(steps.contains(&Step::Hide {
        path: outside.root().join("state/toolvisor.sock"),
        dir: false
    }));
    assert!(
        !steps.iter().any(|s| matches!(s, Step::Hide { path, .. }
            if path.starts_with(PRIVATE_TMP) || path.starts_with(PRIVATE_RUN))),
        "private directories hide their content already: {steps:?}"
    );
    assert!(steps.contains(&Step::Pin(r.join("conf"))));
    assert!(steps.contains(&Step::ReadOnly(r.join("conf/toolvisor.toml"))));
    assert!(
        !steps.contains(&Step::ReadOnly("/etc/hostname".into())),
        "outside writable paths everything is read-only already"
    );
}

#[test]
fn a_protected_directory_is_not_also_pinned_and_its_children_need_nothing() {
    let ws = Ws::new();
    ws.touch(".git/config");
    ws.mkdir(".git/hooks");
    let r = ws.root();
    let roots = [r.clone()];
    let protected = super::super::protect::names(&[PathBuf::from(".git")]);
    let inputs = Inputs {
        roots: &roots,
        writable: &[],
        protected: &protected,
        read_only: &[],
        hidden: &[],
        network: false,
        home: None,
        stage: None,
        shown: &[],
        reveal: &[],
    };
    let steps = plan(&inputs, &HostView);
    assert!(steps.contains(&Step::ReadOnly(r.join(".git"))), "{steps:?}");
    assert!(!steps.contains(&Step::Pin(r.join(".git"))), "{steps:?}");
    assert!(!steps.contains(&Step::ReadOnly(r.join(".git/config"))));
}

#[test]
fn a_staged_root_is_an_overlay_with_its_guards_on_top() {
    let ws = Ws::new();
    ws.touch(".git/config");
    ws.mkdir(".git/hooks");
    let r = ws.root();
    let extra = ws.root().join(".vscode");
    ws.mkdir(".vscode");
    let roots = [r.clone()];
    let writable = [PathBuf::from("/nonexistent-writable")];
    let protected = names();
    let stage = Path::new("/state/staged/abc");
    let inputs = Inputs {
        roots: &roots,
        writable: &writable,
        protected: &protected,
        read_only: &[],
        hidden: &[],
        network: false,
        home: None,
        stage: Some(stage),
        shown: &[],
        reveal: &[],
    };
    let steps = plan(&inputs, &HostView);
    let overlay = Step::Overlay {
        path: r.clone(),
        upper: stage.join("0/upper"),
        work: stage.join("0/work"),
    };
    let at = |s: &Step| steps.iter().position(|x| x == s);
    let o = at(&overlay).unwrap_or_else(|| panic!("{steps:?}"));
    assert!(!steps.contains(&Step::Writable(r.clone())), "{steps:?}");
    for guard in [
        Step::ReadOnly(r.join(".git/config")),
        Step::ReadOnly(extra.clone()),
    ] {
        let g = at(&guard).unwrap_or_else(|| panic!("{guard:?} in {steps:?}"));
        assert!(g > o, "{guard:?} goes on top of the overlay: {steps:?}");
    }
    let unstaged = Inputs {
        stage: None,
        ..inputs
    };
    assert!(plan(&unstaged, &HostView).contains(&Step::Writable(r)));
}

#[test]
fn between_lists_intermediate_directories() {
    assert_eq!(
        between(Path::new("/w"), Path::new("/w/a/b/c")),
        vec![PathBuf::from("/w/a"), PathBuf::from("/w/a/b")]
    );
    assert!(between(Path::new("/w"), Path::new("/w/a")).is_empty());
}
