//! Modules of one crate never depend on each other in a circle: each folder reads one way, from
//! the modules that use to the modules that are used. A module's own tests, comments and its
//! uses of its ancestors (`super::Thing` from a child) do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module's path inside its crate: `["admission", "decide"]` for `src/admission/decide.rs`.
type ModulePath = Vec<String>;

/// Every `.rs` file under `src`, by module path, with its text.
fn modules(src: &Path) -> BTreeMap<ModulePath, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: ModulePath = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module
                .last()
                .is_some_and(|last| ["mod", "lib", "main"].contains(&last.as_str()))
            {
                module.pop();
            }
            out.insert(module, super::read(&path));
        }
    }
    out
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The leading identifier of `text`, if it starts with one.
fn ident(text: &str) -> Option<&str> {
    let end = text.find(|c: char| !is_ident_char(c)).unwrap_or(text.len());
    (end > 0).then(|| &text[..end])
}

/// The module paths `code` (one module's text) names through `crate::`, `self::` or `super::`,
/// resolved from `module`: for a group (`super::{a, b::C}`) each of its members. Comment lines
/// and the module's tests (`#[cfg(test)] mod tests` at its end) are not read.
fn named_paths(module: &[String], code: &str) -> Vec<ModulePath> {
    let product = code
        .split("\n#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    let code: String = product
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .map(|line| format!("{line}\n"))
        .collect();
    let mut out = Vec::new();
    for anchor in ["crate::", "self::", "super::"] {
        let mut from = 0;
        while let Some(found) = code[from..].find(anchor) {
            let at = from + found;
            from = at + anchor.len();
            if code[..at].chars().next_back().is_some_and(is_ident_char) {
                continue;
            }
            let mut base: ModulePath = match anchor {
                "crate::" => Vec::new(),
                "self::" => module.to_vec(),
                _ => module[..module.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = &code[from..];
            while let Some(next) = rest.strip_prefix("super::") {
                base.pop();
                rest = next;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or_default();
                for member in inner.split(',') {
                    if let Some(name) = ident(member.trim()) {
                        let mut path = base.clone();
                        path.push(name.to_string());
                        out.push(path);
                    }
                }
                continue;
            }
            let mut path = base;
            while let Some(name) = ident(rest) {
                path.push(name.to_string());
                match rest[name.len()..].strip_prefix("::") {
                    Some(next) => rest = next,
                    None => break,
                }
            }
            out.push(path);
        }
    }
    out
}

/// Each module's edges to the other modules it names (the longest known prefix of each named
/// path), its ancestors left out.
fn graph(modules: &BTreeMap<ModulePath, String>) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    modules
        .iter()
        .map(|(module, code)| {
            let targets = named_paths(module, code)
                .into_iter()
                .filter_map(|path| {
                    (1..=path.len())
                        .rev()
                        .map(|k| path[..k].to_vec())
                        .find(|prefix| modules.contains_key(prefix))
                })
                .filter(|target| target != module && !module.starts_with(target))
                .collect();
            (module.clone(), targets)
        })
        .collect()
}

/// A circle of modules in `graph`, if there is one, as the modules along it.
fn circle(graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>) -> Option<Vec<ModulePath>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        at: &ModulePath,
        graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>,
        marks: &mut BTreeMap<ModulePath, Mark>,
        trail: &mut Vec<ModulePath>,
    ) -> Option<Vec<ModulePath>> {
        marks.insert(at.clone(), Mark::Open);
        trail.push(at.clone());
        for next in graph.get(at).into_iter().flatten() {
            match marks.get(next) {
                Some(Mark::Open) => {
                    let start = trail.iter().position(|m| m == next).unwrap_or(0);
                    let mut found = trail[start..].to_vec();
                    found.push(next.clone());
                    return Some(found);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(found) = visit(next, graph, marks, trail) {
                        return Some(found);
                    }
                }
            }
        }
        trail.pop();
        marks.insert(at.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for module in graph.keys() {
        if !marks.contains_key(module)
            && let Some(found) = visit(module, graph, &mut marks, &mut Vec::new())
        {
            return Some(found);
        }
    }
    None
}

fn shown(circle: &[ModulePath]) -> String {
    circle
        .iter()
        .map(|m| {
            if m.is_empty() {
                "crate".to_string()
            } else {
                m.join("::")
            }
        })
        .collect::<Vec<_>>()
        .join(" -> ")
}

#[test]
fn no_modules_of_a_crate_depend_on_each_other_in_a_circle() {
    let root = super::root();
    let mut crates = 0;
    for member in super::workspace_members(&super::read(&root.join("Cargo.toml"))) {
        let src = root.join(&member).join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        let modules = modules(&src);
        if let Some(found) = circle(&graph(&modules)) {
            panic!(
                "{member}: modules depend on each other in a circle: {}",
                shown(&found)
            );
        }
    }
    assert!(crates >= 10, "only {crates} crates read");
}

#[test]
fn a_circle_is_found_through_groups_and_supers() {
    let file = |path: &[&str], code: &str| {
        (
            path.iter().map(|s| s.to_string()).collect::<ModulePath>(),
            code.to_string(),
        )
    };
    let mut modules: BTreeMap<ModulePath, String> = [
        file(&[], "mod config;\n"),
        file(&["config"], "mod fairshare;\nmod pools;\n"),
        file(
            &["config", "fairshare"],
            "use super::{pools::Pool, Other};\n",
        ),
        file(
            &["config", "pools"],
            "fn f() { crate::config::fairshare::g() }\n",
        ),
    ]
    .into_iter()
    .collect();
    let found = circle(&graph(&modules)).expect("the circle fairshare -> pools -> fairshare");
    assert_eq!(
        shown(&found),
        "config::fairshare -> config::pools -> config::fairshare"
    );
    // A comment, a test module and a use of an ancestor are not dependencies.
    modules.insert(
        ["config", "pools"].iter().map(|s| s.to_string()).collect(),
        "// crate::config::fairshare::g()\nuse super::Config;\n\n#[cfg(test)]\nmod tests {\n    use crate::config::fairshare::g;\n}\n"
            .to_string(),
    );
    assert_eq!(circle(&graph(&modules)), None);
}
