//! ARCHITECTURE.md stays true: every crate its table names exists under the folder it gives,
//! every workspace crate is in the table, each crate's `[dependencies]` use only the workspace
//! crates the table allows and none of what the rules forbid, and every path the page names
//! exists; and no crate's modules depend on each other in a circle (`module_graph`).

#[path = "architecture/module_graph.rs"]
mod module_graph;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cells of every table row of `text` whose first cell starts with `first`.
fn rows(text: &str, first: impl Fn(&str) -> bool) -> Vec<Vec<String>> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix('|')?.strip_suffix('|'))
        .map(|inner| inner.split('|').map(|c| c.trim().to_string()).collect())
        .filter(|cells: &Vec<String>| cells.first().is_some_and(|c| first(c)))
        .collect()
}

/// The texts between backticks in `cell`.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Package names a `Cargo.toml` lists as normal or build dependencies (any target), not
/// dev-dependencies.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut inside = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            let header = line.trim_matches(|c| c == '[' || c == ']');
            inside = header.ends_with("dependencies") && !header.ends_with("dev-dependencies");
            continue;
        }
        if !inside || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = line
            .split(['=', '.'])
            .next()
            .unwrap_or_default()
            .trim()
            .trim_matches('"');
        if !key.is_empty() {
            names.insert(key.to_string());
        }
    }
    names
}

/// `members = [...]` of the workspace manifest.
fn workspace_members(manifest: &str) -> Vec<String> {
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("workspace members");
    quoted(&line.replace('"', "`"))
}

struct Crate {
    name: String,
    folder: String,
    may_use: BTreeSet<String>,
}

fn crates(page: &str) -> Vec<Crate> {
    rows(page, |c| c.starts_with("gpufair-"))
        .into_iter()
        .map(|cells| {
            assert_eq!(cells.len(), 4, "crate row {cells:?}");
            let folder = quoted(&cells[1]).first().cloned().expect("folder");
            let may_use = cells[3]
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty() && *s != "–")
                .map(|s| format!("gpufair-{s}"))
                .collect();
            Crate {
                name: cells[0].clone(),
                folder: folder.trim_end_matches('/').to_string(),
                may_use,
            }
        })
        .collect()
}

#[test]
fn crate_table_matches_the_workspace() {
    let root = root();
    let page = read(&root.join("ARCHITECTURE.md"));
    let table = crates(&page);
    assert!(table.len() >= 8, "crate table: {} rows", table.len());
    for krate in &table {
        let manifest = read(&root.join(&krate.folder).join("Cargo.toml"));
        assert!(
            manifest.contains(&format!("name = \"{}\"", krate.name)),
            "{}/Cargo.toml is not package {}",
            krate.folder,
            krate.name
        );
        let used: BTreeSet<String> = dependencies(&manifest)
            .into_iter()
            .filter(|d| d.starts_with("gpufair-"))
            .collect();
        let not_allowed: Vec<_> = used.difference(&krate.may_use).collect();
        assert!(
            not_allowed.is_empty(),
            "{} depends on {not_allowed:?}, which ARCHITECTURE.md does not allow it",
            krate.name
        );
    }
    let documented: BTreeSet<&str> = table.iter().map(|c| c.folder.as_str()).collect();
    for member in workspace_members(&read(&root.join("Cargo.toml"))) {
        assert!(
            documented.contains(member.as_str()),
            "workspace crate {member}/ is missing from ARCHITECTURE.md's crate table"
        );
    }
}

#[test]
fn no_crate_breaks_a_rule() {
    let root = root();
    let page = read(&root.join("ARCHITECTURE.md"));
    let table = crates(&page);
    let rules = rows(&page, |c| {
        !c.starts_with("gpufair-") && !c.starts_with("---")
    })
    .into_iter()
    .filter(|cells| cells.len() == 3 && cells[1].starts_with("`gpufair-"))
    .collect::<Vec<_>>();
    assert!(rules.len() >= 3, "rules table: {} rows", rules.len());
    for cells in rules {
        let krate = quoted(&cells[1]).remove(0);
        let forbidden = quoted(&cells[2]);
        assert!(!forbidden.is_empty(), "rule {:?} names nothing", cells[0]);
        let folder = &table
            .iter()
            .find(|c| c.name == krate)
            .unwrap_or_else(|| panic!("rule names {krate}, which is not in the crate table"))
            .folder;
        let used = dependencies(&read(&root.join(folder).join("Cargo.toml")));
        for name in forbidden {
            assert!(
                !used.contains(&name),
                "{krate} depends on {name}, against the rule {:?}",
                cells[0]
            );
        }
    }
}

#[test]
fn every_path_the_page_names_exists() {
    let root = root();
    let page = read(&root.join("ARCHITECTURE.md"));
    let tops: BTreeSet<String> = fs::read_dir(&root)
        .expect("workspace root")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let mut checked = 0;
    for path in quoted(&page) {
        let top = path.split('/').next().unwrap_or_default();
        if !path.contains('/') || path.contains(' ') || !tops.contains(top) {
            continue;
        }
        assert!(
            root.join(&path).exists(),
            "ARCHITECTURE.md names {path}, which does not exist"
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} paths found on the page");
}

#[test]
fn dependencies_reads_only_normal_and_build_sections() {
    let manifest = "[package]\nname = \"x\"\n[dependencies]\ngpufair-core.workspace = true\nkube = { version = \"1\" }\n# note\n[dev-dependencies]\ntokio = \"1\"\n[target.'cfg(unix)'.dependencies]\nlibc = \"0.2\"\n[build-dependencies]\n\"cc\" = \"1\"\n";
    let names: Vec<_> = dependencies(manifest).into_iter().collect();
    assert_eq!(names, ["cc", "gpufair-core", "kube", "libc"]);
}

/// The controller's `model/` folder holds what involves no I/O: no file in it awaits anything,
/// so the line ARCHITECTURE.md draws between the model and `io/` is the code's.
#[test]
fn the_controller_model_does_no_io() {
    let dir = root().join("controller/src/model");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        files += 1;
        let text = read(&path);
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            assert!(
                !code.contains(".await") && !code.contains("async fn"),
                "{}:{}: the model does no I/O, but this line awaits: {line}",
                path.display(),
                n + 1
            );
        }
    }
    assert!(files >= 10, "only {files} files in {}", dir.display());
}
