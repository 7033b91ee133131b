//! The state tools against a store in a temp directory: seed 002's properties 50–57
//! as property tests, size bounds, broken files, and concurrent writers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use toolvisor_protocol::tools::{memory as mem_tool, write_todos as todo_tool};
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorType, Status};

use super::store::Store;
use super::{FILES, run_on};
use crate::search::testutil::{Ws, ws};

struct Env {
    w: Ws,
    store: Store,
}

fn env() -> Env {
    let w = ws();
    let state = w.ctx.init.state_dir.clone();
    std::fs::create_dir_all(&state).unwrap();
    let store = Store::prepare(&state, FILES).unwrap();
    Env { w, store }
}

impl Env {
    fn call(&self, tool: &str, args: Value) -> Outcome {
        crate::context::outcome(run_on(&self.store, tool, &args, &self.w.ctx))
    }
    fn mem(&self, args: Value) -> Outcome {
        self.call(mem_tool::NAME, args)
    }
    fn todo(&self, args: Value) -> Outcome {
        self.call(todo_tool::NAME, args)
    }
}

fn ok(o: &Outcome) -> String {
    assert_eq!(o.status, Status::Ok, "{o:?}");
    o.content.clone()
}

fn err(o: &Outcome) -> ErrorType {
    assert_eq!(o.status, Status::Error, "{o:?}");
    let e = o.error.as_ref().expect("an error object");
    assert!(!e.message.is_empty());
    assert_eq!(o.content, format!("Error: {}", e.message));
    e.kind
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    // Property 50: storing a pair and then retrieving it returns the same value.
    // Property 52: listing returns exactly the stored keys (sorted).
    #[test]
    fn memory_round_trips_and_lists_exactly_its_keys(
        pairs in prop::collection::btree_map("[^\\p{Cc}]{1,24}", ".{0,64}", 0..12)
    ) {
        let e = env();
        for (k, v) in &pairs {
            prop_assert_eq!(ok(&e.mem(json!({"action": "set", "key": k, "value": v}))), format!("Stored {k}"));
        }
        for (k, v) in &pairs {
            let got = e.mem(json!({"action": "get", "key": k}));
            prop_assert_eq!(ok(&got), v.as_str());
        }
        let listed: Vec<String> = ok(&e.mem(json!({"action": "list"}))).lines().map(str::to_owned).collect();
        let keys: Vec<String> = pairs.keys().cloned().collect();
        prop_assert_eq!(listed, keys);
    }

    // Property 51: after deleting a stored key, retrieval says it is not found.
    #[test]
    fn deleted_keys_are_not_found(keys in prop::collection::btree_set("[a-z]{1,8}", 1..8), pick in any::<prop::sample::Index>()) {
        let e = env();
        for k in &keys {
            ok(&e.mem(json!({"action": "set", "key": k, "value": "v"})));
        }
        let gone = pick.get(&keys.iter().collect::<Vec<_>>()).to_string();
        prop_assert_eq!(ok(&e.mem(json!({"action": "delete", "key": gone}))), format!("Deleted {gone}"));
        prop_assert_eq!(ok(&e.mem(json!({"action": "get", "key": gone}))), "Key not found");
        prop_assert_eq!(ok(&e.mem(json!({"action": "delete", "key": gone}))), "Key not found");
        for k in keys.iter().filter(|k| **k != gone) {
            prop_assert_eq!(ok(&e.mem(json!({"action": "get", "key": k}))), "v");
        }
    }

    // Properties 53–56: add gives a new unique id, not completed; complete marks it
    // done; remove takes it out; list shows every todo with its state, in order.
    #[test]
    fn todos_follow_their_actions(ops in prop::collection::vec((0u8..4, "[a-zA-Z0-9][a-zA-Z0-9 ]{0,19}", any::<prop::sample::Index>()), 1..30)) {
        let e = env();
        let mut model: Vec<(String, String, bool)> = Vec::new();
        for (op, task, pick) in ops {
            match op {
                0 | 1 => {
                    let out = ok(&e.todo(json!({"action": "add", "task": task})));
                    let id = out.strip_prefix("Added todo: ").expect("Added todo: <id>").to_owned();
                    prop_assert!(!model.iter().any(|(i, _, _)| *i == id), "ids are unique");
                    model.push((id, task, false));
                }
                2 if !model.is_empty() => {
                    let i = pick.index(model.len());
                    let id = model[i].0.clone();
                    prop_assert_eq!(ok(&e.todo(json!({"action": "complete", "id": id}))), format!("Completed todo: {id}"));
                    model[i].2 = true;
                }
                3 if !model.is_empty() => {
                    let i = pick.index(model.len());
                    let id = model.remove(i).0;
                    prop_assert_eq!(ok(&e.todo(json!({"action": "remove", "id": id}))), format!("Removed todo: {id}"));
                    prop_assert_eq!(err(&e.todo(json!({"action": "complete", "id": id}))), ErrorType::TodoError);
                }
                _ => {}
            }
            let want: Vec<String> = model
                .iter()
                .map(|(id, t, done)| format!("[{}] {id}: {t}", if *done { 'x' } else { ' ' }))
                .collect();
            prop_assert_eq!(ok(&e.todo(json!({"action": "list"}))), want.join("\n"));
        }
    }
}

// Property 57: every failure has an error object with a message and a type.
#[test]
fn failures_are_typed_and_say_why() {
    let e = env();
    for (args, needle) in [
        (json!({"action": "get"}), "`key` is required for get"),
        (
            json!({"action": "set", "key": "k"}),
            "`value` is required for set",
        ),
        (
            json!({"action": "set", "value": "v"}),
            "`key` is required for set",
        ),
        (json!({"action": "delete"}), "`key` is required for delete"),
        (
            json!({"action": "set", "key": "", "value": "v"}),
            "the key is empty",
        ),
        (
            json!({"action": "set", "key": "a\nb", "value": "v"}),
            "control characters",
        ),
        (
            json!({"action": "set", "key": "k".repeat(257), "value": "v"}),
            "at most 256",
        ),
        (
            json!({"action": "set", "key": "k", "value": "v".repeat(64 * 1024 + 1)}),
            "at most 65536",
        ),
    ] {
        let o = e.mem(args.clone());
        assert_eq!(err(&o), ErrorType::MemoryError, "{args}");
        assert!(o.content.contains(needle), "{args}: {}", o.content);
    }
    assert_eq!(
        ok(&e.mem(json!({"action": "set", "key": "k", "value": ""}))),
        "Stored k"
    );
    assert_eq!(
        ok(&e.mem(json!({"action": "get", "key": "k"}))),
        "",
        "an empty string is a value"
    );
    for (args, needle) in [
        (json!({"action": "add"}), "`task` is required for add"),
        (json!({"action": "add", "task": "  "}), "the task is empty"),
        (json!({"action": "add", "task": "a\nb"}), "one line"),
        (
            json!({"action": "add", "task": "t".repeat(1025)}),
            "at most 1024",
        ),
        (
            json!({"action": "complete"}),
            "`id` is required for complete",
        ),
        (
            json!({"action": "remove", "id": "nope"}),
            "Todo not found: nope",
        ),
    ] {
        let o = e.todo(args.clone());
        assert_eq!(err(&o), ErrorType::TodoError, "{args}");
        assert!(o.content.contains(needle), "{args}: {}", o.content);
    }
    assert_eq!(
        ok(&e.todo(json!({"action": "list"}))),
        "",
        "an empty list is empty content"
    );
}

#[test]
fn the_number_of_entries_is_bounded() {
    let e = env();
    let full: BTreeMap<String, String> = (0..mem_tool::MAX_KEYS)
        .map(|i| (format!("k{i}"), "v".into()))
        .collect();
    let dir = super::store::dir(&e.w.ctx.init.state_dir);
    std::fs::write(dir.join("memory.json"), serde_json::to_vec(&full).unwrap()).unwrap();
    let o = e.mem(json!({"action": "set", "key": "one-more", "value": "v"}));
    assert_eq!(err(&o), ErrorType::MemoryError);
    assert!(o.content.contains("holds 1000 keys"));
    assert_eq!(
        ok(&e.mem(json!({"action": "set", "key": "k1", "value": "w"}))),
        "Stored k1",
        "replacing is fine"
    );
    let todos: Vec<Value> = (0..todo_tool::MAX_TODOS)
        .map(|i| json!({"id": format!("{i:08x}"), "task": "t", "completed": false}))
        .collect();
    std::fs::write(dir.join("todos.json"), serde_json::to_vec(&todos).unwrap()).unwrap();
    assert_eq!(
        err(&e.todo(json!({"action": "add", "task": "x"}))),
        ErrorType::TodoError
    );
}

/// Values of control characters take six bytes each in the file: a store that would
/// pass the size the store can read back is refused before it is written, and what
/// was stored stays readable.
#[test]
fn the_store_never_grows_past_what_can_be_read_back() {
    let e = env();
    let value = "\u{1}".repeat(mem_tool::MAX_VALUE);
    let mut refused = None;
    for i in 0..40 {
        let o = e.mem(json!({"action": "set", "key": format!("k{i}"), "value": value}));
        if o.error.is_some() {
            refused = Some((i, o));
            break;
        }
    }
    let (i, o) = refused.expect("the store filled up");
    assert_eq!(err(&o), ErrorType::MemoryError);
    assert!(o.content.contains("nothing was changed"), "{}", o.content);
    let listed = ok(&e.mem(json!({"action": "list"})));
    assert_eq!(
        listed.lines().count(),
        i,
        "every earlier key is still there"
    );
    assert_eq!(
        ok(&e.mem(json!({"action": "delete", "key": "k0"}))),
        "Deleted k0"
    );
}

#[test]
fn a_broken_file_is_reported_and_left_alone() {
    let e = env();
    let dir = super::store::dir(&e.w.ctx.init.state_dir);
    std::fs::write(dir.join("memory.json"), "{not json").unwrap();
    let o = e.mem(json!({"action": "set", "key": "k", "value": "v"}));
    assert_eq!(err(&o), ErrorType::MemoryError);
    assert!(o.content.contains("left as it is"), "{}", o.content);
    assert_eq!(
        std::fs::read_to_string(dir.join("memory.json")).unwrap(),
        "{not json"
    );
    std::fs::write(dir.join("todos.json"), "{\"a\": 1}").unwrap();
    assert_eq!(
        err(&e.todo(json!({"action": "list"}))),
        ErrorType::TodoError
    );
    let big = vec![b' '; (super::store::MAX_FILE + 1) as usize];
    std::fs::write(dir.join("todos.json"), big).unwrap();
    let o = e.todo(json!({"action": "list"}));
    assert!(o.content.contains("larger than"), "{}", o.content);
}

#[test]
fn concurrent_adds_from_two_stores_lose_nothing() {
    // Two stores on one directory stand for two state workers (separate lock files
    // descriptions, so `flock` is what keeps them apart); 8 threads on each.
    let e = Arc::new(env());
    let state = e.w.ctx.init.state_dir.clone();
    let other = Arc::new(Store::prepare(&state, FILES).unwrap());
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let (e, other) = (e.clone(), other.clone());
            std::thread::spawn(move || {
                let store: &Store = if i % 2 == 0 { &e.store } else { &other };
                for j in 0..5 {
                    let args = json!({"action": "add", "task": format!("t{i}-{j}")});
                    let o =
                        crate::context::outcome(run_on(store, todo_tool::NAME, &args, &e.w.ctx));
                    assert_eq!(o.status, Status::Ok, "{o:?}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let list = e.todo(json!({"action": "list"}));
    let tasks: BTreeSet<String> = ok(&list)
        .lines()
        .map(|l| l.rsplit_once(": ").unwrap().1.to_owned())
        .collect();
    assert_eq!(tasks.len(), 80, "no add is lost");
}
