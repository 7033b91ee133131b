//! Which variables hold integers: a variable the command only ever sets to an integer
//! literal or an arithmetic result stays safe to expand unquoted. This finds the ones
//! a node may set to anything else, so a loop can forget them before its body runs.

use std::collections::HashSet;

use tree_sitter::Node;

use super::{first_token, has_token, is_integer};

/// Builtins that set the variables they are given.
const SETTERS: &[&str] = &[
    "read",
    "mapfile",
    "readarray",
    "getopts",
    "printf",
    "wait",
    "unset",
    "export",
    "declare",
    "typeset",
    "local",
    "readonly",
];

/// Variables a node may set to something other than an integer literal or an
/// arithmetic result: assignments with other values, `read X`, `for X in`, `${X:=…}`.
pub(super) fn unsafely_assigned(n: Node<'_>, src: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    let text = |x: Node<'_>| src[x.byte_range()].to_owned();
    let mut todo = vec![n];
    while let Some(n) = todo.pop() {
        match n.kind() {
            "variable_assignment" if !in_arithmetic(n) => {
                let name = n.named_child(0).map(text).unwrap_or_default();
                let value = n.named_child(1);
                let integer = value
                    .is_some_and(|v| v.kind() == "arithmetic_expansion" || is_integer(&text(v)));
                if !integer || has_token(n, "+=") {
                    out.insert(name.split('[').next().unwrap_or_default().to_owned());
                }
            }
            "for_statement" => {
                out.extend(n.child_by_field_name("variable").map(text));
            }
            "declaration_command" | "unset_command" => {
                let mut c = n.walk();
                for k in n.named_children(&mut c) {
                    let t = match k.kind() {
                        "variable_assignment" => k.named_child(0).map(text).unwrap_or_default(),
                        _ => text(k),
                    };
                    out.insert(t.split(['[', '=']).next().unwrap_or_default().to_owned());
                }
            }
            "command" => {
                let program = n.child_by_field_name("name").map(text).unwrap_or_default();
                if SETTERS.contains(&program.as_str()) {
                    let mut c = n.walk();
                    for k in n.children_by_field_name("argument", &mut c) {
                        let t = text(k);
                        out.insert(t.split('[').next().unwrap_or_default().to_owned());
                    }
                }
            }
            "expansion" if has_token(n, "=") || has_token(n, ":=") => {
                let mut c = n.walk();
                let var = n
                    .named_children(&mut c)
                    .find(|k| k.kind() == "variable_name")
                    .map(text);
                out.extend(var);
            }
            _ => {}
        }
        let mut c = n.walk();
        todo.extend(n.children(&mut c));
    }
    out
}

/// An assignment inside arithmetic (`for ((i=0;…))`, `$((x=1))`): its value is a number.
fn in_arithmetic(n: Node<'_>) -> bool {
    let mut p = n.parent();
    while let Some(x) = p {
        match x.kind() {
            "c_style_for_statement"
            | "arithmetic_expansion"
            | "binary_expression"
            | "parenthesized_expression" => return true,
            "compound_statement" => return first_token(x) == Some("(("),
            "command" | "program" | "list" | "do_group" => return false,
            _ => p = x.parent(),
        }
    }
    false
}
