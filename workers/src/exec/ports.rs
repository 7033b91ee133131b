//! Which TCP ports a background process listens on, read from `/proc`: the sockets in
//! `LISTEN` state of its network namespace (`/proc/<pid>/net/tcp` and `tcp6` of its
//! shim, which entered that namespace) that one of its processes holds (their
//! `/proc/<pid>/fd` links name the socket's inode). In a namespace of its own only the
//! job's processes are there anyway; with the host's network, the descriptors tell its
//! sockets from everyone else's.

use std::collections::HashSet;

/// The ports each job (named by its shim's pid) listens on, sorted; one read of the
/// process table for all of them.
pub(crate) fn listening_each(roots: &[u32]) -> Vec<Vec<u16>> {
    let raw: Vec<i32> = roots.iter().map(|&r| r as i32).collect();
    let trees = toolvisor_sandbox::reap::descendants_of_each(&raw);
    raw.iter()
        .zip(trees)
        .map(|(&root, tree)| listening_in(root, &tree))
        .collect()
}

/// The ports the job under `root` listens on.
pub(crate) fn listening(root: u32) -> Vec<u16> {
    listening_each(&[root]).pop().unwrap_or_default()
}

fn listening_in(root: i32, tree: &[i32]) -> Vec<u16> {
    let mut inodes = HashSet::new();
    let mut readable = false;
    for &pid in std::iter::once(&root).chain(tree) {
        readable |= socket_inodes(pid, &mut inodes);
    }
    let mut ports: Vec<u16> = ["tcp", "tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(format!("/proc/{root}/net/{f}")).ok())
        .flat_map(|table| listeners(&table))
        // Descriptors that cannot be read: only a namespace of its own says whose.
        .filter(|(_, inode)| inodes.contains(inode) || (!readable && own_network(root)))
        .map(|(port, _)| port)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Add the inodes of the sockets `pid` holds; whether its descriptors could be read.
fn socket_inodes(pid: i32, into: &mut HashSet<u64>) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    for entry in dir.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let target = target.to_string_lossy();
        if let Some(n) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse().ok())
        {
            into.insert(n);
        }
    }
    true
}

/// Whether `pid` is in another network namespace than this worker.
fn own_network(pid: i32) -> bool {
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net"));
    let ours = std::fs::read_link("/proc/self/ns/net");
    matches!((theirs, ours), (Ok(a), Ok(b)) if a != b)
}

/// `TCP_LISTEN` in the `st` column of `/proc/net/tcp`.
const LISTEN: &str = "0A";

/// (local port, inode) of each listening socket in a `/proc/net/tcp{,6}` table.
fn listeners(table: &str) -> Vec<(u16, u64)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(3) != Some(&LISTEN) {
                return None;
            }
            let port = f.get(1)?.rsplit_once(':')?.1;
            let port = u16::from_str_radix(port, 16).ok()?;
            let inode = f.get(9)?.parse().ok()?;
            Some((port, inode))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_parsed_from_the_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 4243 1 0000000000000000 20 4 30 10 -1\n";
        assert_eq!(listeners(table), vec![(8080, 4242)]);
        assert_eq!(listeners(""), vec![]);
    }

    #[test]
    fn a_listener_of_this_process_is_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id();
        let mine = listening_in(me as i32, &[]);
        assert!(mine.contains(&port), "{mine:?} lacks {port}");
        drop(l);
        assert!(!listening_in(me as i32, &[]).contains(&port));
    }
}
