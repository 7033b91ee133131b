//! Skills found, skipped with a reason, announced and activated.

use serde_json::json;
use toolvisor_protocol::ErrorType;

use super::*;
use crate::search::testutil::{Ws, ws};

fn skill(w: &Ws, dir: &str, front: &str, body: &str) {
    w.write(
        &format!("{dir}/SKILL.md"),
        format!("---\n{front}\n---\n{body}"),
    );
}

fn paths() -> Vec<String> {
    vec![".skills".into(), ".claude/skills".into()]
}

#[test]
fn skills_are_found_under_every_path_sorted_and_skipped_with_a_reason() {
    let w = ws();
    skill(
        &w,
        ".skills/pdf",
        "name: pdf\ndescription: Read PDF files",
        "# PDF\n",
    );
    skill(
        &w,
        ".claude/skills/git",
        "name: git-helper\ndescription: >\n  Git\n  tricks",
        "Use git.\n",
    );
    w.write(".skills/plain/SKILL.md", "# No front matter here\n");
    skill(&w, ".skills/nodesc", "name: nodesc", "x");
    skill(&w, ".skills/dup", "name: pdf\ndescription: again", "x");
    skill(
        &w,
        ".skills/bad name",
        "name: \"has space\"\ndescription: d",
        "x",
    );
    w.mkdir(".skills/empty");
    w.write(".skills/README.md", "not a skill dir");
    let (found, warnings) = discover(&w.ctx.resolver, &paths());
    let names: Vec<&str> = found.iter().map(|f| f.skill.name.as_str()).collect();
    assert_eq!(names, ["git-helper", "pdf"]);
    assert_eq!(found[0].skill.description, "Git tricks");
    assert_eq!(found[0].dir, ".claude/skills/git");
    let all = warnings.join("\n");
    assert!(
        all.contains(".skills/plain/SKILL.md: it has no YAML front matter"),
        "{all}"
    );
    assert!(
        all.contains(".skills/nodesc/SKILL.md: its front matter has no `description`"),
        "{all}"
    );
    assert!(all.contains("already named `pdf`"), "{all}");
    assert!(all.contains("has space"), "{all}");
    assert_eq!(warnings.len(), 4, "{all}");
}

#[test]
fn no_skills_no_tool() {
    let w = ws();
    assert!(announce(&w.ctx.resolver, &paths()).is_empty());
    w.write(".skills/plain/SKILL.md", "no front matter");
    assert!(announce(&w.ctx.resolver, &paths()).is_empty());
    skill(&w, ".skills/a", "name: a\ndescription: first", "");
    let tools = announce(&w.ctx.resolver, &paths());
    assert_eq!(tools.len(), 1);
    assert_eq!(
        tools[0].input_schema["properties"]["name"]["enum"],
        json!(["a"])
    );
    assert!(tools[0].description.contains("- a: first"));
}

#[test]
fn symlinks_out_of_the_workspace_are_not_skills() {
    let w = ws();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("SKILL.md"),
        "---\nname: evil\ndescription: outside\n---\nsteal things\n",
    )
    .unwrap();
    w.mkdir(".skills");
    std::os::unix::fs::symlink(outside.path(), w.root().join(".skills/evil")).unwrap();
    std::os::unix::fs::symlink("../../..", w.root().join(".skills/up")).unwrap();
    let (found, warnings) = discover(&w.ctx.resolver, &paths());
    assert!(found.is_empty(), "{found:?}");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
}

#[test]
fn activation_gives_the_body_and_the_files() {
    let w = ws();
    skill(
        &w,
        ".skills/pdf",
        "name: pdf\ndescription: PDFs",
        "\n# PDF\nRun scripts/x.py.\n",
    );
    w.write(".skills/pdf/scripts/x.py", "print(1)\n");
    w.write(".skills/pdf/ref/forms.md", "forms\n");
    let o = run(tools::activate_skill::NAME, &json!({"name": "pdf"}), &w.ctx);
    assert_eq!(o.status, toolvisor_protocol::Status::Ok, "{o:?}");
    assert_eq!(
        o.content,
        "# PDF\nRun scripts/x.py.\n\nSkill directory: .skills/pdf\nFiles:\nSKILL.md\nref/\nref/forms.md\nscripts/\nscripts/x.py"
    );
    assert_eq!(o.meta["files"], json!(5));
    let gone = run(
        tools::activate_skill::NAME,
        &json!({"name": "nope"}),
        &w.ctx,
    );
    assert_eq!(gone.error.unwrap().kind, ErrorType::FileNotFoundError);
}
