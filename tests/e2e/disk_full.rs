//! A full disk under the audit log: no tool starts while the log cannot be written
//! (never a silent gap), and service resumes by itself once there is room again.
//! Needs a tmpfs mount (root); skipped otherwise.

use std::process::Command;

use serde_json::json;
use toolvisor_protocol::{ErrorType, Status};

use crate::harness::*;

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_stops_tools_then_service_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k", "tmpfs"])
        .arg(&state)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    }
    let _mount = Mount(state.clone());
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("toolvisor.toml"),
        format!("[server]\nstate_dir = \"{}\"\n", state.display()),
    )
    .unwrap();
    std::fs::write(ws.path().join("a.txt"), "alpha\n").unwrap();
    let mut s = Server {
        dir: ws,
        child: None,
        log: std::sync::mpsc::channel().1,
        log_seen: Vec::new(),
    };
    let (child, log) = spawn_serve(s.ws());
    s.child = Some(child);
    s.log = log;
    s.wait_log("serving", START_DEADLINE);
    let socket = state.join("toolvisor.sock");
    block(T, async {
        let call = |path: &'static str| {
            let socket = socket.clone();
            async move {
                let mut c = toolvisor_protocol::client::Client::connect(&socket, "t", false)
                    .await
                    .unwrap();
                call_on(&mut c, "c", "read_file", json!({"path": path})).await
            }
        };
        assert_eq!(call("a.txt").await.status, Status::Ok);
        // Fill the disk.
        let filler = state.join("filler");
        let _ = std::fs::write(&filler, vec![0u8; 600 * 1024]);
        let mut refused = None;
        for _ in 0..200 {
            let r = call("a.txt").await;
            if r.status != Status::Ok {
                refused = Some(r);
                break;
            }
        }
        let r = refused.expect("a call must be refused once the log cannot be written");
        assert_eq!(
            r.error.as_ref().unwrap().kind,
            ErrorType::InternalError,
            "{r:?}"
        );
        assert!(
            r.error
                .as_ref()
                .unwrap()
                .message
                .contains("audit unavailable"),
            "{r:?}"
        );
        // Room again: service resumes by itself.
        std::fs::remove_file(&filler).unwrap();
        let mut resumed = false;
        for _ in 0..100 {
            if call("a.txt").await.status == Status::Ok {
                resumed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(
            resumed,
            "service did not resume after the disk had room again"
        );
    });
    s.stop();
    let out = Command::new(BIN)
        .arg("--workspace")
        .arg(s.ws())
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
