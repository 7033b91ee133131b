//! Hidden paths: credential stores a command cannot read (absent or empty, never their
//! content) and the file tools refuse, under a decoy HOME inside the workspace (commands
//! get a private `/tmp`, so a HOME there would be hidden by that alone and prove
//! nothing); a store that is a symlink is hidden where it leads too.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use toolvisor_protocol::{ErrorType, Status};

use crate::harness::*;

const T: Duration = Duration::from_secs(60);

fn put(base: &Path, rel: &str, content: &str) {
    let p = base.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

#[test]
fn credential_stores_are_hidden_from_commands_and_refused_by_file_tools() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let home = ws.join("home");
    put(&home, ".ssh/id_ed25519", "DECOY-SSH\n");
    put(&home, ".aws/credentials", "DECOY-AWS\n");
    put(&home, ".cargo/credentials.toml", "DECOY-CARGO\n");
    put(&home, ".cargo/config.toml", "visible-config\n");
    put(&home, "vault/kube/config", "DECOY-KUBE\n");
    std::os::unix::fs::symlink(home.join("vault/kube"), home.join(".kube")).unwrap();
    put(&home, "notes.txt", "visible-notes\n");
    put(&ws, "secrets/a.pem", "DECOY-PEM\n");
    std::fs::write(
        ws.join("toolvisor.toml"),
        format!("{ALLOW_ALL}\n[workers.exec]\nhidden = [\"secrets/*.pem\"]\n"),
    )
    .unwrap();
    let s = Server::start_in_with_env(dir, &[("HOME", home.to_str().unwrap())]);
    let sandboxed = block(T, async { s.guards().await.namespaces });
    if !sandboxed {
        eprintln!("hidden: no command namespaces on this host; skipping");
        return;
    }
    block(T, async {
        let reads = "cat ~/.ssh/id_ed25519 ~/.aws/credentials ~/.cargo/credentials.toml \
                     ~/.kube/config home/vault/kube/config secrets/a.pem /etc/shadow 2>&1; \
                     ls -a ~/.ssh; cat ~/notes.txt ~/.cargo/config.toml";
        let r = s.call("run_command", json!({"command": reads})).await;
        assert!(
            !r.content.contains("DECOY"),
            "a store leaked: {}",
            r.content
        );
        assert!(
            !r.content.contains("root:"),
            "/etc/shadow leaked: {}",
            r.content
        );
        assert!(r.content.contains("visible-notes"), "{}", r.content);
        assert!(r.content.contains("visible-config"), "{}", r.content);
        for path in [
            "home/.ssh/id_ed25519",
            "secrets/a.pem",
            "home/.aws/credentials",
            "home/vault/kube/config",
        ] {
            let r = s.call("read_file", json!({"path": path})).await;
            assert_eq!(r.status, Status::Error, "{path}: {r:?}");
            assert_eq!(
                r.error.as_ref().map(|e| e.kind),
                Some(ErrorType::PermissionError),
                "{path}: {r:?}"
            );
        }
        let r = s.call("grep", json!({"pattern": "DECOY"})).await;
        assert!(!r.content.contains("DECOY-SSH"), "{}", r.content);
        assert!(!r.content.contains("DECOY-PEM"), "{}", r.content);
        // The stores are still there on the host, untouched.
        assert!(
            std::fs::read_to_string(s.ws().join("home/.ssh/id_ed25519"))
                .unwrap()
                .contains("DECOY")
        );
    });
}
