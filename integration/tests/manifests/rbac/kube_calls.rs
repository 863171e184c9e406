//! Finds the calls a component's code makes to the API server by reading its syntax.
//!
//! A call is a candidate when its name and argument count are those of a kube client call: an
//! `Api` method that sends a request, the Event recorder's `publish`, or a kube-runtime function
//! that starts a watch. A candidate is a kube call when its receiver provably is an `Api` or a
//! `Recorder`: a binding or parameter of that type, a struct field declared with it, a
//! constructor (`Api::all(..)`), a function of the scanned code returning it, or a `.clone()`
//! of any of these. Every other candidate is listed as "other" in files whose code uses kube,
//! so a kube call the scan cannot resolve still changes a count. Items only compiled for tests
//! (`#[cfg(test)]`, `#[test]`, and the files of `#[cfg(test)] mod x;`) are left out; comments and
//! string literals are never code.
//!
//! Macro bodies are not syntax to syn: they are parsed as comma-separated expressions where
//! they are (`format!`, `assert!`), and otherwise (`tokio::select!`, `json!`) walked as tokens,
//! where each candidate is parsed from the tokens that end in it and its receiver classified
//! the same way; a candidate that does not parse is "other".

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{
    Attribute, Block, Expr, ExprCall, ExprMethodCall, FnArg, ImplItem, Item, Member, Meta, Pat,
    ReturnType, Signature, Stmt, TraitItem, Type, UseTree,
};

/// kube-client 5's `Api` methods that send a request, with their argument counts (`self` not
/// counted). Methods that only build or inspect an `Api` (`namespace`, `resource_url`) are not
/// here.
const API_METHODS: &[(&str, usize)] = &[
    ("get", 1),
    ("get_with", 2),
    ("get_opt", 1),
    ("get_metadata", 1),
    ("get_metadata_with", 2),
    ("get_metadata_opt", 1),
    ("get_metadata_opt_with", 2),
    ("get_status", 1),
    ("get_subresource", 2),
    ("get_scale", 1),
    ("get_ephemeral_containers", 1),
    ("get_resize", 1),
    ("entry", 1),
    ("list", 1),
    ("list_metadata", 1),
    ("watch", 2),
    ("watch_metadata", 2),
    ("create", 2),
    ("create_subresource", 4),
    ("replace", 3),
    ("replace_status", 3),
    ("replace_subresource", 4),
    ("replace_scale", 3),
    ("replace_ephemeral_containers", 3),
    ("replace_resize", 3),
    ("patch", 3),
    ("patch_status", 3),
    ("patch_subresource", 4),
    ("patch_metadata", 3),
    ("patch_scale", 3),
    ("patch_ephemeral_containers", 3),
    ("patch_resize", 3),
    ("delete", 2),
    ("delete_collection", 2),
    ("evict", 2),
    ("logs", 2),
    ("log_stream", 2),
    ("attach", 2),
    ("exec", 3),
    ("portforward", 2),
];

/// kube-runtime 5's `Recorder::publish(&event, &reference)`.
const RECORDER_METHODS: &[(&str, usize)] = &[("publish", 2)];

/// kube-runtime 5's functions that start requests (`reflector` feeds a store from a watch).
const RUNTIME_FUNCTIONS: &[(&str, usize)] = &[
    ("watcher", 2),
    ("metadata_watcher", 2),
    ("watch_object", 2),
    ("await_condition", 3),
    ("reflector", 2),
];

/// Methods whose result is the client they are called on, or a copy of it.
const SAME_CLIENT_METHODS: &[(&str, usize)] = &[
    ("clone", 0),
    ("constrain", 1),
    ("unconstrain", 0),
    ("constrain_default", 0),
];

/// Whether a candidate call is provably made on a kube client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Receiver {
    Kube,
    Other,
}

/// The kube client types whose methods reach the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    Api,
    Recorder,
}

impl Client {
    fn methods(self) -> &'static [(&'static str, usize)] {
        match self {
            Client::Api => API_METHODS,
            Client::Recorder => RECORDER_METHODS,
        }
    }
}

fn listed(table: &[(&str, usize)], name: &str, arity: usize) -> bool {
    table.iter().any(|&(n, a)| n == name && a == arity)
}

fn is_candidate_method(name: &str, arity: usize) -> bool {
    listed(API_METHODS, name, arity) || listed(RECORDER_METHODS, name, arity)
}

/// One candidate call found in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub file: String,
    pub call: String,
    pub receiver: Receiver,
    pub line: usize,
}

/// A parsed source file, named by its path relative to the repository.
pub struct Source {
    pub file: String,
    pub syntax: syn::File,
}

impl Source {
    pub fn parse(file: &str, code: &str) -> Source {
        Source {
            file: file.to_string(),
            syntax: syn::parse_file(code).unwrap_or_else(|e| panic!("{file}: {e}")),
        }
    }
}

/// Every `.rs` file under `dirs` (relative to `root`) that is compiled outside tests.
pub fn read_sources(root: &Path, dirs: &[&str]) -> Vec<Source> {
    let mut paths = Vec::new();
    for dir in dirs {
        rust_files(&root.join(dir), &mut paths);
    }
    let parsed: BTreeMap<PathBuf, syn::File> = paths
        .into_iter()
        .map(|path| {
            let code = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let syntax =
                syn::parse_file(&code).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, syntax)
        })
        .collect();
    let test_only = test_only_files(&parsed);
    parsed
        .into_iter()
        .filter(|(path, _)| !test_only.contains(path))
        .map(|(path, syntax)| Source {
            file: path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/"),
            syntax,
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of modules declared `#[cfg(test)] mod name;`, and every module file they declare.
fn test_only_files(parsed: &BTreeMap<PathBuf, syn::File>) -> BTreeSet<PathBuf> {
    let declared: Vec<(&PathBuf, PathBuf, bool)> = parsed
        .iter()
        .flat_map(|(path, syntax)| {
            syntax.items.iter().filter_map(move |item| match item {
                Item::Mod(m) if m.content.is_none() => {
                    let child = module_file(path, &m.ident.to_string(), parsed)?;
                    Some((path, child, only_in_tests(&m.attrs)))
                }
                _ => None,
            })
        })
        .collect();
    let mut test_only = BTreeSet::new();
    loop {
        let before = test_only.len();
        for (parent, child, in_tests) in &declared {
            if *in_tests || test_only.contains(*parent) {
                test_only.insert(child.clone());
            }
        }
        if test_only.len() == before {
            return test_only;
        }
    }
}

/// Where `mod name;` in `parent` finds its code: beside a `lib.rs`, `main.rs` or `mod.rs`, else
/// in the directory named after the parent.
fn module_file(
    parent: &Path,
    name: &str,
    parsed: &BTreeMap<PathBuf, syn::File>,
) -> Option<PathBuf> {
    let dir = parent.parent()?;
    let stem = parent.file_stem()?.to_str()?;
    let base = if ["lib", "main", "mod"].contains(&stem) {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    [
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| parsed.contains_key(p))
}

/// Whether the attributes compile their item for tests only: `#[test]`, `#[tokio::test]`,
/// `#[cfg(test)]`, `#[cfg(all(test, ..))]`.
fn only_in_tests(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        if path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        path.is_ident("cfg")
            && attr
                .parse_args::<Meta>()
                .is_ok_and(|meta| cfg_only_in_tests(&meta))
    })
}

fn cfg_only_in_tests(meta: &Meta) -> bool {
    match meta {
        Meta::Path(p) => p.is_ident("test"),
        Meta::List(list) => {
            let Ok(nested) =
                list.parse_args_with(Punctuated::<Meta, syn::Token![,]>::parse_terminated)
            else {
                return false;
            };
            if list.path.is_ident("all") {
                nested.iter().any(cfg_only_in_tests)
            } else if list.path.is_ident("any") {
                !nested.is_empty() && nested.iter().all(cfg_only_in_tests)
            } else {
                false
            }
        }
        Meta::NameValue(_) => false,
    }
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn impl_item_attrs(item: &ImplItem) -> &[Attribute] {
    match item {
        ImplItem::Const(i) => &i.attrs,
        ImplItem::Fn(i) => &i.attrs,
        ImplItem::Type(i) => &i.attrs,
        ImplItem::Macro(i) => &i.attrs,
        _ => &[],
    }
}

fn trait_item_attrs(item: &TraitItem) -> &[Attribute] {
    match item {
        TraitItem::Const(i) => &i.attrs,
        TraitItem::Fn(i) => &i.attrs,
        TraitItem::Type(i) => &i.attrs,
        TraitItem::Macro(i) => &i.attrs,
        _ => &[],
    }
}

/// The kube client a value of this type is: `Api<K>`, `Recorder`, a reference to either, or
/// either behind an `Arc`, `Rc` or `Box`.
fn client_of_type(ty: &Type) -> Option<Client> {
    match ty {
        Type::Reference(r) => client_of_type(&r.elem),
        Type::Paren(p) => client_of_type(&p.elem),
        Type::Group(g) => client_of_type(&g.elem),
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            match last.ident.to_string().as_str() {
                "Api" => Some(Client::Api),
                "Recorder" => Some(Client::Recorder),
                "Arc" | "Rc" | "Box" => match &last.arguments {
                    syn::PathArguments::AngleBracketed(args) => {
                        args.args.iter().find_map(|arg| match arg {
                            syn::GenericArgument::Type(t) => client_of_type(t),
                            _ => None,
                        })
                    }
                    _ => None,
                },
                _ => None,
            }
        }
        _ => None,
    }
}

/// The kube client type a path's segments name (those before a function's name): the `Api` of
/// `kube::Api::<Pod>::all`.
fn client_named_in(segments: &[&syn::PathSegment]) -> Option<Client> {
    segments
        .iter()
        .find_map(|s| match s.ident.to_string().as_str() {
            "Api" => Some(Client::Api),
            "Recorder" => Some(Client::Recorder),
            _ => None,
        })
}

fn returned_client(sig: &Signature) -> Option<Client> {
    match &sig.output {
        ReturnType::Type(_, ty) => client_of_type(ty),
        ReturnType::Default => None,
    }
}

/// The `Visit` methods that leave out items only compiled for tests; both visitors below
/// skip the same items, so the declarations they collect and the calls they find agree.
macro_rules! skip_test_only_items {
    () => {
        fn visit_item(&mut self, item: &'ast Item) {
            if !only_in_tests(item_attrs(item)) {
                visit::visit_item(self, item);
            }
        }

        fn visit_impl_item(&mut self, item: &'ast ImplItem) {
            if !only_in_tests(impl_item_attrs(item)) {
                visit::visit_impl_item(self, item);
            }
        }

        fn visit_trait_item(&mut self, item: &'ast TraitItem) {
            if !only_in_tests(trait_item_attrs(item)) {
                visit::visit_trait_item(self, item);
            }
        }
    };
}

/// What the scanned code declares with kube client types, across all files: a field or
/// function found in one file explains a call in another.
#[derive(Default)]
struct Declarations {
    /// Struct fields by name.
    fields: HashMap<String, Client>,
    /// Methods (with a `self` receiver) by name and argument count, without `self`.
    methods: HashMap<(String, usize), Client>,
    /// Free and associated functions by name and argument count.
    functions: HashMap<(String, usize), Client>,
    /// Per file: the names its `use` items bring in from `kube`.
    kube_imports: HashMap<String, BTreeSet<String>>,
}

struct DeclarationCollector<'a> {
    declarations: &'a mut Declarations,
    imports: BTreeSet<String>,
}

impl DeclarationCollector<'_> {
    fn function(&mut self, sig: &Signature) {
        let Some(client) = returned_client(sig) else {
            return;
        };
        let has_self = sig.receiver().is_some();
        let arity = sig.inputs.len() - usize::from(has_self);
        let key = (sig.ident.to_string(), arity);
        if has_self {
            self.declarations.methods.insert(key, client);
        } else {
            self.declarations.functions.insert(key, client);
        }
    }
}

impl<'ast> Visit<'ast> for DeclarationCollector<'_> {
    skip_test_only_items!();

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if let (Some(name), Some(client)) = (&field.ident, client_of_type(&field.ty)) {
            self.declarations.fields.insert(name.to_string(), client);
        }
        visit::visit_field(self, field);
    }

    fn visit_signature(&mut self, sig: &'ast Signature) {
        self.function(sig);
        visit::visit_signature(self, sig);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        kube_names(&item.tree, None, &mut self.imports);
    }
}

/// The names a `use` tree brings in from the `kube` crate; `parent` is the path segment above
/// `tree` once inside `kube`.
fn kube_names(tree: &UseTree, parent: Option<&syn::Ident>, out: &mut BTreeSet<String>) {
    match (tree, parent) {
        (UseTree::Path(p), _) if parent.is_some() || p.ident == "kube" => {
            kube_names(&p.tree, Some(&p.ident), out);
        }
        // `use kube::runtime::reflector::{self, Store}` brings in `reflector`.
        (UseTree::Name(n), Some(parent)) if n.ident == "self" => {
            out.insert(parent.to_string());
        }
        (UseTree::Name(n), Some(_)) => {
            out.insert(n.ident.to_string());
        }
        (UseTree::Rename(r), Some(_)) => {
            out.insert(r.rename.to_string());
        }
        (UseTree::Group(g), _) => {
            for tree in &g.items {
                kube_names(tree, parent, out);
            }
        }
        _ => {}
    }
}

fn line(span: Span) -> usize {
    span.start().line
}

/// Walks one file's non-test code, tracking which local names hold a kube client.
struct CallScanner<'a> {
    declarations: &'a Declarations,
    file: &'a str,
    kube_imports: &'a BTreeSet<String>,
    /// Innermost last: each block, closure, match arm, loop and `if` opens one.
    scopes: Vec<HashMap<String, Option<Client>>>,
    mentions_kube: bool,
    found: Vec<Found>,
}

impl<'a> CallScanner<'a> {
    fn bind(&mut self, name: String, client: Option<Client>) {
        self.scopes
            .last_mut()
            .expect("a scope is open")
            .insert(name, client);
    }

    /// Binds every name in `pat`; a plain `name` or `name: Type` gets `client`, names inside
    /// tuples, structs and enums hold no provable client.
    fn bind_pattern(&mut self, pat: &Pat, client: Option<Client>) {
        match pat {
            Pat::Ident(p) if p.subpat.is_none() => self.bind(p.ident.to_string(), client),
            Pat::Type(p) => {
                let client = client_of_type(&p.ty).or(client);
                self.bind_pattern(&p.pat, client)
            }
            _ => {
                let mut names = PatternNames(Vec::new());
                names.visit_pat(pat);
                for name in names.0 {
                    self.bind(name, None);
                }
            }
        }
    }

    fn binding(&self, name: &str) -> Option<Client> {
        self.scopes
            .iter()
            .rev()
            .find_map(|scope| scope.get(name))
            .copied()
            .flatten()
    }

    fn in_scope(&mut self, visit: impl FnOnce(&mut Self)) {
        self.scopes.push(HashMap::new());
        visit(self);
        self.scopes.pop();
    }

    /// A function body sees its parameters, never the enclosing function's locals.
    fn in_function(&mut self, sig: &Signature, block: &Block) {
        let outer = std::mem::replace(&mut self.scopes, vec![HashMap::new()]);
        for input in &sig.inputs {
            if let FnArg::Typed(arg) = input {
                self.bind_pattern(&arg.pat, client_of_type(&arg.ty));
            }
        }
        self.visit_block(block);
        self.scopes = outer;
    }

    /// The kube client `expr` provably evaluates to.
    fn client_of(&self, expr: &Expr) -> Option<Client> {
        match expr {
            Expr::Reference(r) => self.client_of(&r.expr),
            Expr::Paren(p) => self.client_of(&p.expr),
            Expr::Group(g) => self.client_of(&g.expr),
            Expr::Path(p) if p.qself.is_none() => {
                let ident = p.path.get_ident()?;
                self.binding(&ident.to_string())
            }
            Expr::Field(f) => match &f.member {
                Member::Named(name) => self.declarations.fields.get(&name.to_string()).copied(),
                Member::Unnamed(_) => None,
            },
            Expr::Call(call) => {
                let Expr::Path(func) = &*call.func else {
                    return None;
                };
                let mut segments: Vec<_> = func.path.segments.iter().collect();
                let last = segments.pop()?;
                // `Api::all(..)`, `Api::<Pod>::namespaced(..)`, `kube::Api::all(..)`,
                // `Recorder::new(..)`.
                client_named_in(&segments).or_else(|| {
                    let key = (last.ident.to_string(), call.args.len());
                    self.declarations.functions.get(&key).copied()
                })
            }
            Expr::MethodCall(call) => {
                let name = call.method.to_string();
                if listed(SAME_CLIENT_METHODS, &name, call.args.len()) {
                    self.client_of(&call.receiver)
                } else {
                    let key = (name, call.args.len());
                    self.declarations.methods.get(&key).copied()
                }
            }
            Expr::Block(b) => match b.block.stmts.last() {
                Some(Stmt::Expr(tail, None)) => self.client_of(tail),
                _ => None,
            },
            Expr::If(e) => {
                let (_, otherwise) = e.else_branch.as_ref()?;
                let then = match e.then_branch.stmts.last() {
                    Some(Stmt::Expr(tail, None)) => self.client_of(tail),
                    _ => None,
                }?;
                (self.client_of(otherwise) == Some(then)).then_some(then)
            }
            _ => None,
        }
    }

    fn record(&mut self, call: &str, receiver: Receiver, span: Span) {
        self.found.push(Found {
            file: self.file.to_string(),
            call: call.to_string(),
            receiver,
            line: line(span),
        });
    }

    fn method_call(&mut self, call: &ExprMethodCall) {
        let name = call.method.to_string();
        let arity = call.args.len();
        if is_candidate_method(&name, arity) {
            let receiver = match self.client_of(&call.receiver) {
                Some(client) if listed(client.methods(), &name, arity) => Receiver::Kube,
                _ => Receiver::Other,
            };
            self.record(&name, receiver, call.method.span());
        }
    }

    /// `watcher(api, config)` is kube's when the path starts at `kube` or at a name this file
    /// imports from it (`use kube::runtime::watcher`), so a function of our own of the same
    /// name is not taken for it. `Api::get(&api, &name)` is the method called through its type.
    fn function_call(&mut self, call: &ExprCall) {
        let Expr::Path(func) = &*call.func else {
            return;
        };
        let mut segments: Vec<_> = func.path.segments.iter().collect();
        let Some(last) = segments.pop() else {
            return;
        };
        let name = last.ident.to_string();
        let arity = call.args.len();
        let receiver = if let Some(client) = client_named_in(&segments) {
            // The first argument is the method's `self`.
            match arity.checked_sub(1) {
                Some(arity) if listed(client.methods(), &name, arity) => Receiver::Kube,
                _ => return,
            }
        } else if listed(RUNTIME_FUNCTIONS, &name, arity) {
            let first = segments.first().unwrap_or(&last).ident.to_string();
            if first == "kube" || self.kube_imports.contains(&first) {
                Receiver::Kube
            } else {
                Receiver::Other
            }
        } else {
            return;
        };
        self.record(&name, receiver, last.ident.span());
    }

    /// A macro body syn could not parse as expressions: each brace group is tried as
    /// statements and each other group as expressions; tokens around them are searched for
    /// candidate names followed by parentheses.
    fn walk_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        // The first token of the current comma- or semicolon-separated part.
        let mut part_start = 0;
        for (at, token) in tokens.iter().enumerate() {
            match token {
                TokenTree::Punct(p) if p.as_char() == ',' || p.as_char() == ';' => {
                    part_start = at + 1;
                }
                TokenTree::Punct(p) if p.as_char() == ':' => {
                    if matches!(at.checked_sub(1).map(|i| &tokens[i]), Some(TokenTree::Ident(i)) if i == "kube")
                    {
                        self.mentions_kube = true;
                    }
                }
                TokenTree::Group(group) => self.walk_group(group),
                TokenTree::Ident(ident) => {
                    if let Some(TokenTree::Group(args)) = tokens.get(at + 1)
                        && args.delimiter() == Delimiter::Parenthesis
                    {
                        self.token_call(&tokens[part_start..at + 2], ident);
                    }
                }
                TokenTree::Literal(_) | TokenTree::Punct(_) => {}
            }
        }
    }

    fn walk_group(&mut self, group: &proc_macro2::Group) {
        if group.delimiter() == Delimiter::Brace
            && let Ok(stmts) = Block::parse_within.parse2(group.stream())
        {
            self.in_scope(|scanner| {
                for stmt in &stmts {
                    scanner.visit_stmt(stmt);
                }
            });
        } else if let Ok(exprs) =
            Punctuated::<Expr, syn::Token![,]>::parse_terminated.parse2(group.stream())
        {
            for expr in &exprs {
                self.visit_expr(expr);
            }
        } else {
            self.walk_tokens(group.stream());
        }
    }

    /// `tokens` ends in `name(args)`: the call is the longest tail of `tokens` that parses as
    /// a call of `name` (`api.get(&n)` out of `r = api.get(&n)`), then judged as parsed code is.
    fn token_call(&mut self, tokens: &[TokenTree], name: &proc_macro2::Ident) {
        let name_text = name.to_string();
        let known = [API_METHODS, RECORDER_METHODS, RUNTIME_FUNCTIONS]
            .iter()
            .any(|table| table.iter().any(|&(n, _)| n == name_text));
        if !known {
            return;
        }
        let is_method = tokens.len() >= 3
            && matches!(&tokens[tokens.len() - 3], TokenTree::Punct(p) if p.as_char() == '.');
        for start in 0..tokens.len() - 1 {
            let tail: TokenStream = tokens[start..].iter().cloned().collect();
            match syn::parse2::<Expr>(tail) {
                Ok(Expr::MethodCall(call)) if is_method && call.method == name_text => {
                    return self.method_call(&call);
                }
                Ok(Expr::Call(call)) if !is_method => {
                    return self.function_call(&call);
                }
                _ => {}
            }
        }
        // No expression ends here (the macro's own syntax, `$api.get($n)`): a candidate by its
        // name and counted arguments, on a receiver nothing proves.
        if let Some(TokenTree::Group(args)) = tokens.last()
            && is_method
            && is_candidate_method(&name_text, argument_count(args.stream()))
        {
            self.record(&name_text, Receiver::Other, name.span());
        }
    }
}

/// The top-level comma-separated arguments in a call's parentheses.
fn argument_count(args: TokenStream) -> usize {
    let mut count = 0;
    let mut in_argument = false;
    for token in args {
        match token {
            TokenTree::Punct(p) if p.as_char() == ',' => {
                count += usize::from(in_argument);
                in_argument = false;
            }
            _ => in_argument = true,
        }
    }
    count + usize::from(in_argument)
}

/// The names a pattern binds.
struct PatternNames(Vec<String>);

impl<'ast> Visit<'ast> for PatternNames {
    fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
        self.0.push(p.ident.to_string());
        visit::visit_pat_ident(self, p);
    }
}

impl<'ast> Visit<'ast> for CallScanner<'_> {
    skip_test_only_items!();

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.visit_signature(&item.sig);
        self.in_function(&item.sig, &item.block);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.visit_signature(&item.sig);
        self.in_function(&item.sig, &item.block);
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        self.visit_signature(&item.sig);
        if let Some(block) = &item.default {
            self.in_function(&item.sig, block);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.mentions_kube |= matches!(&item.tree, UseTree::Path(p) if p.ident == "kube");
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 && path.segments[0].ident == "kube" {
            self.mentions_kube = true;
        }
        visit::visit_path(self, path);
    }

    fn visit_block(&mut self, block: &'ast Block) {
        self.in_scope(|scanner| visit::visit_block(scanner, block));
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        // The initializer runs before the pattern binds: `let x = x.list(..)` reads the old `x`.
        let mut client = None;
        if let Some(init) = &local.init {
            self.visit_expr(&init.expr);
            if let Some((_, diverge)) = &init.diverge {
                self.visit_expr(diverge);
            }
            client = self.client_of(&init.expr);
        }
        self.visit_pat(&local.pat);
        self.bind_pattern(&local.pat, client);
    }

    fn visit_expr_closure(&mut self, closure: &'ast syn::ExprClosure) {
        self.in_scope(|scanner| {
            for input in &closure.inputs {
                scanner.bind_pattern(input, None);
            }
            scanner.visit_expr(&closure.body);
        });
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        self.in_scope(|scanner| {
            scanner.bind_pattern(&arm.pat, None);
            if let Some((_, guard)) = &arm.guard {
                scanner.visit_expr(guard);
            }
            scanner.visit_expr(&arm.body);
        });
    }

    fn visit_expr_for_loop(&mut self, for_loop: &'ast syn::ExprForLoop) {
        self.visit_expr(&for_loop.expr);
        self.in_scope(|scanner| {
            scanner.bind_pattern(&for_loop.pat, None);
            scanner.visit_block(&for_loop.body);
        });
    }

    fn visit_expr_if(&mut self, expr: &'ast syn::ExprIf) {
        // `if let` binds for the condition and the `then` block only.
        self.in_scope(|scanner| {
            scanner.visit_expr(&expr.cond);
            scanner.visit_block(&expr.then_branch);
        });
        if let Some((_, otherwise)) = &expr.else_branch {
            self.visit_expr(otherwise);
        }
    }

    fn visit_expr_while(&mut self, expr: &'ast syn::ExprWhile) {
        self.in_scope(|scanner| {
            scanner.visit_expr(&expr.cond);
            scanner.visit_block(&expr.body);
        });
    }

    fn visit_expr_let(&mut self, expr: &'ast syn::ExprLet) {
        self.visit_expr(&expr.expr);
        self.bind_pattern(&expr.pat, None);
    }

    fn visit_expr_method_call(&mut self, call: &'ast ExprMethodCall) {
        self.method_call(call);
        visit::visit_expr_method_call(self, call);
    }

    fn visit_expr_call(&mut self, call: &'ast ExprCall) {
        self.function_call(call);
        visit::visit_expr_call(self, call);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        match mac.parse_body_with(Punctuated::<Expr, syn::Token![,]>::parse_terminated) {
            Ok(exprs) => {
                for expr in &exprs {
                    self.visit_expr(expr);
                }
            }
            Err(_) => self.walk_tokens(mac.tokens.clone()),
        }
    }
}

/// The candidate calls in `sources`: kube calls in every file, other calls only in files whose
/// non-test code uses kube.
pub fn scan(sources: &[Source]) -> Vec<Found> {
    let mut declarations = Declarations::default();
    for source in sources {
        let mut collector = DeclarationCollector {
            declarations: &mut declarations,
            imports: BTreeSet::new(),
        };
        collector.visit_file(&source.syntax);
        let imports = collector.imports;
        declarations
            .kube_imports
            .insert(source.file.clone(), imports);
    }
    let mut found = Vec::new();
    for source in sources {
        let mut scanner = CallScanner {
            declarations: &declarations,
            file: &source.file,
            kube_imports: &declarations.kube_imports[&source.file],
            scopes: vec![HashMap::new()],
            mentions_kube: false,
            found: Vec::new(),
        };
        scanner.visit_file(&source.syntax);
        let mentions_kube = scanner.mentions_kube;
        found.extend(
            scanner
                .found
                .into_iter()
                .filter(|f| mentions_kube || f.receiver == Receiver::Kube),
        );
    }
    found
}

/// `(call, receiver)` of every call the scan counts in `code`, in order.
fn calls_in(code: &str) -> Vec<(String, Receiver)> {
    scan(&[Source::parse("snippet.rs", code)])
        .into_iter()
        .map(|f| (f.call, f.receiver))
        .collect()
}

fn kube_call(name: &str) -> (String, Receiver) {
    (name.to_string(), Receiver::Kube)
}

fn other_call(name: &str) -> (String, Receiver) {
    (name.to_string(), Receiver::Other)
}

#[test]
fn a_method_of_another_arity_is_no_candidate() {
    let code = "use kube::Api;
        fn port(p: std::num::NonZeroU16) -> u16 { p.get() }";
    assert_eq!(calls_in(code), []);
}

#[test]
fn a_map_lookup_is_an_other_call() {
    let code = "use kube::Api;
        fn find(map: &HashMap<String, u32>, k: String) -> Option<&u32> { map.get(&k) }";
    assert_eq!(calls_in(code), [other_call("get")]);
}

#[test]
fn other_calls_count_only_where_the_code_uses_kube() {
    let code = "fn find(map: &HashMap<String, u32>, k: String) -> Option<&u32> { map.get(&k) }";
    assert_eq!(calls_in(code), []);
}

#[test]
fn a_binding_typed_api_is_a_kube_receiver() {
    let code = "use kube::Api;
        async fn read(client: Client, n: String) {
            let api: Api<Pod> = client.into();
            api.get(&n).await;
        }";
    assert_eq!(calls_in(code), [kube_call("get")]);
}

#[test]
fn a_shadowing_binding_is_no_longer_a_kube_receiver() {
    let code = "use kube::Api;
        async fn read(client: Client, lp: ListParams, n: String) {
            let pods: Api<Pod> = Api::all(client);
            let pods = pods.list(&lp).await.unwrap().items;
            pods.get(0);
        }";
    assert_eq!(calls_in(code), [kube_call("list"), other_call("get")]);
}

#[test]
fn a_call_on_a_constructed_api_is_kube() {
    let code = "async fn read(c: kube::Client, lp: ListParams) {
            Api::<Pod>::all(c).list(&lp).await;
        }";
    assert_eq!(calls_in(code), [kube_call("list")]);
}

#[test]
fn a_method_called_through_its_type_is_kube() {
    let code = "async fn read(api: Api<Pod>, n: String, lp: ListParams) {
            Api::get(&api, &n).await;
            kube::Api::<Pod>::list(&api, &lp).await;
            tokio::select! { r = Api::get(&api, &n) => {} }
        }";
    assert_eq!(
        calls_in(code),
        [kube_call("get"), kube_call("list"), kube_call("get")]
    );
}

#[test]
fn a_call_on_a_method_returning_api_is_kube() {
    let code = "use kube::Api;
        struct Applier { client: Client }
        impl Applier {
            fn pods(&self, ns: &str) -> Api<Pod> { Api::namespaced(self.client.clone(), ns) }
            async fn drop_pod(&self, ns: &str, n: String, dp: DeleteParams) {
                self.pods(ns)
                    .delete(&n, &dp)
                    .await;
            }
        }";
    assert_eq!(calls_in(code), [kube_call("delete")]);
}

#[test]
fn the_recorder_field_publishes_and_a_one_argument_publish_is_no_candidate() {
    let code = "use kube::runtime::events::Recorder;
        struct Applier { recorder: Recorder }
        impl Applier {
            async fn event(&self, e: Event, r: ObjectReference, sink: Sink, x: u32) {
                self.recorder.publish(&e, &r).await;
                sink.publish(&x).await;
            }
        }";
    assert_eq!(calls_in(code), [kube_call("publish")]);
}

#[test]
fn a_parameter_typed_api_reference_and_its_clone_are_kube_receivers() {
    let code = "async fn renew(api: &Api<Lease>, n: &str, pp: PostParams, l: Lease) {
            api.replace(n, &pp, &l).await;
            let copy = api.clone();
            copy.get_opt(n).await;
        }";
    assert_eq!(calls_in(code), [kube_call("replace"), kube_call("get_opt")]);
}

#[test]
fn test_code_comments_and_strings_are_not_scanned() {
    let code = r#"use kube::Api;
        // api.get(&n) in a comment
        fn describe() -> &'static str { "api.get(&n) in a string" }
        #[cfg(test)]
        mod tests {
            async fn read(api: Api<Pod>, n: String) { api.get(&n).await; }
        }
        #[test]
        fn reads() { let api: Api<Pod> = todo(); api.get(&n); }
        struct Fake;
        #[cfg(test)]
        impl Fake { fn read(&self, api: Api<Pod>) { api.get(&n); } }"#;
    assert_eq!(calls_in(code), []);
}

#[test]
fn a_call_inside_select_is_found() {
    let code = "async fn read(api: Api<Pod>, n: String, map: HashMap<String, u32>) {
            tokio::select! {
                r = api.get(&n) => { map.get(&n); }
                _ = tokio::time::sleep(d) => {}
            }
        }";
    assert_eq!(calls_in(code), [kube_call("get")]);
    let with_kube = format!("use kube::Api;\n{code}");
    assert_eq!(calls_in(&with_kube), [kube_call("get"), other_call("get")]);
}

#[test]
fn calls_in_macros_that_parse_as_expressions_are_found() {
    let code = "async fn read(api: Api<Pod>, n: String) {
            tracing::info!(found = ?api.get_opt(&n).await, \"read\");
            println!(\"{:?}\", api.get(&n).await);
        }";
    assert_eq!(calls_in(code), [kube_call("get_opt"), kube_call("get")]);
}

#[test]
fn a_watcher_imported_from_kube_counts_and_one_of_our_own_does_not() {
    let code = "use kube::runtime::watcher;
        fn start(api: Api<Pod>, cfg: watcher::Config, x: u32) {
            let s = watcher(api, cfg);
            let t = my_watcher(x);
        }";
    assert_eq!(calls_in(code), [kube_call("watcher")]);
    let own = "use kube::Api;
        fn watcher(a: u32, b: u32) {}
        fn start() { watcher(1, 2); }";
    assert_eq!(calls_in(own), [other_call("watcher")]);
}

#[test]
fn a_candidate_in_tokens_that_are_no_expression_is_an_other_call() {
    let code = "use kube::Api;
        macro_rules! read { ($api:ident, $n:expr) => { $api.get($n) }; }";
    assert_eq!(calls_in(code), [other_call("get")]);
}

#[test]
fn argument_counts_ignore_a_trailing_comma() {
    let args = |code: &str| argument_count(code.parse().unwrap());
    assert_eq!(args(""), 0);
    assert_eq!(args("a"), 1);
    assert_eq!(args("a, f(b, c),"), 2);
}
