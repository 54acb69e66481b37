//! Import circles between the files of a Rust crate.
//!
//! A crate's files form a graph: file A points at file B when A names an item of B (a `use`
//! declaration or a path in its code, `crate::…`, `super::…`, `self::…` or a child module's
//! name). A circle is a set of files that reach each other through such arrows. A module that
//! names its own descendants (`mod.rs` declaring and re-exporting its children) is not counted:
//! owning is not importing. Test code (`#[cfg(test)]` items and the files they declare) is left
//! out, since tests may look anywhere.
//!
//! The reader is syntactic (`syn`): it follows `mod name;` to `name.rs` or `name/mod.rs`, knows
//! inline modules, and resolves a path to the deepest module it names. A path that starts with
//! a name brought in by a `use` was already counted at that `use`. Macros' bodies are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module of the crate: its path from the crate root and the file that holds it.
#[derive(Debug, Clone)]
struct Module {
    file: PathBuf,
}

/// Why a crate could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// A file could not be read.
    Io(PathBuf, std::io::Error),
    /// A file is not Rust `syn` can parse.
    Parse(PathBuf, syn::Error),
    /// `mod name;` names a file that is neither `name.rs` nor `name/mod.rs`.
    MissingModule(PathBuf, String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(p, e) => write!(f, "{}: {e}", p.display()),
            Self::Parse(p, e) => write!(f, "{}: not parseable: {e}", p.display()),
            Self::MissingModule(p, m) => {
                write!(f, "{}: `mod {m};` has no file", p.display())
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// One arrow: `from` names `names` of `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrow {
    /// The importing file.
    pub from: PathBuf,
    /// The imported file.
    pub to: PathBuf,
    /// The names taken (the paths' last segments).
    pub names: BTreeSet<String>,
}

/// A circle: files that reach each other, and the arrows between them.
#[derive(Debug, Clone)]
pub struct Circle {
    /// The files, sorted.
    pub files: Vec<PathBuf>,
    /// The arrows among them.
    pub arrows: Vec<Arrow>,
}

impl fmt::Display for Circle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "circle of {} files:", self.files.len())?;
        for a in &self.arrows {
            let names: Vec<&str> = a.names.iter().map(String::as_str).collect();
            writeln!(
                f,
                "  {} -> {}: {}",
                a.from.display(),
                a.to.display(),
                names.join(", ")
            )?;
        }
        Ok(())
    }
}

/// A crate read from its root file: its modules and the arrows between its files.
#[derive(Debug, Default)]
pub struct Crate {
    modules: BTreeMap<Vec<String>, Module>,
    /// Per file: (module the path appears in, the path's segments).
    paths: Vec<(PathBuf, Vec<String>, Vec<String>)>,
}

impl Crate {
    /// Reads the crate whose root is `root` (`lib.rs` or `main.rs`).
    pub fn read(root: &Path) -> Result<Self, ReadError> {
        let mut krate = Crate::default();
        krate.read_file(root, Vec::new(), true)?;
        Ok(krate)
    }

    fn read_file(&mut self, file: &Path, at: Vec<String>, owns_dir: bool) -> Result<(), ReadError> {
        let text = std::fs::read_to_string(file).map_err(|e| ReadError::Io(file.into(), e))?;
        let parsed = syn::parse_file(&text).map_err(|e| ReadError::Parse(file.into(), e))?;
        self.modules
            .insert(at.clone(), Module { file: file.into() });
        // Where `mod x;` files of this file's module live.
        let dir = if owns_dir {
            file.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned());
            file.parent()
                .map(|p| p.join(stem.unwrap_or_default()))
                .unwrap_or_default()
        };
        self.read_items(file, &dir, &at, &parsed.items)
    }

    fn read_items(
        &mut self,
        file: &Path,
        dir: &Path,
        at: &[String],
        items: &[syn::Item],
    ) -> Result<(), ReadError> {
        for item in items {
            if is_test_only(item) {
                continue;
            }
            match item {
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    let mut inner = at.to_vec();
                    inner.push(name.clone());
                    match &m.content {
                        Some((_, items)) => {
                            self.modules
                                .insert(inner.clone(), Module { file: file.into() });
                            self.read_items(file, &dir.join(&name), &inner, items)?;
                        }
                        None => {
                            let flat = dir.join(format!("{name}.rs"));
                            let nested = dir.join(&name).join("mod.rs");
                            if flat.is_file() {
                                self.read_file(&flat, inner, false)?;
                            } else if nested.is_file() {
                                self.read_file(&nested, inner, true)?;
                            } else {
                                return Err(ReadError::MissingModule(file.into(), name));
                            }
                        }
                    }
                }
                syn::Item::Use(u) => {
                    let mut out = Vec::new();
                    flatten_use(&u.tree, &mut Vec::new(), &mut out);
                    for p in out {
                        self.paths.push((file.into(), at.to_vec(), p));
                    }
                }
                other => {
                    let mut seen = PathsSeen::default();
                    seen.visit_item(other);
                    for p in seen.paths {
                        self.paths.push((file.into(), at.to_vec(), p));
                    }
                }
            }
        }
        Ok(())
    }

    /// The module a path written in module `at` names, as deep as the crate's modules go;
    /// `None` for a path outside the crate (another crate, the prelude, a local name).
    fn resolve(&self, at: &[String], path: &[String]) -> Option<Vec<String>> {
        let first = path.first()?;
        let (mut base, rest): (Vec<String>, &[String]) = match first.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (at.to_vec(), &path[1..]),
            "super" => {
                let mut base = at.to_vec();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                (base, rest)
            }
            name => {
                let mut child = at.to_vec();
                child.push(name.to_string());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                (at.to_vec(), path)
            }
        };
        for seg in rest {
            base.push(seg.clone());
            if !self.modules.contains_key(&base) {
                base.pop();
                break;
            }
        }
        Some(base)
    }

    /// Every arrow between two files of the crate, merged per pair.
    pub fn arrows(&self) -> Vec<Arrow> {
        let mut by_pair: BTreeMap<(PathBuf, PathBuf), BTreeSet<String>> = BTreeMap::new();
        for (file, at, path) in &self.paths {
            let Some(target) = self.resolve(at, path) else {
                continue;
            };
            let Some(module) = self.modules.get(&target) else {
                continue;
            };
            if &module.file == file {
                continue;
            }
            // The file's own module: the shortest module path held by this file.
            let own = self.file_module(file);
            if own.as_ref().is_some_and(|own| target.starts_with(own)) {
                continue; // a module naming its own descendants: owning, not importing
            }
            let name = path.last().cloned().unwrap_or_default();
            by_pair
                .entry((file.clone(), module.file.clone()))
                .or_default()
                .insert(name);
        }
        by_pair
            .into_iter()
            .map(|((from, to), names)| Arrow { from, to, names })
            .collect()
    }

    fn file_module(&self, file: &Path) -> Option<Vec<String>> {
        self.modules
            .iter()
            .filter(|(_, m)| m.file == file)
            .map(|(p, _)| p.clone())
            .min_by_key(Vec::len)
    }

    /// The circles among the crate's files (strongly connected sets of two files or more).
    pub fn circles(&self) -> Vec<Circle> {
        circles_of(&self.arrows())
    }
}

/// The strongly connected sets of two files or more among `arrows` (Tarjan's algorithm).
pub fn circles_of(arrows: &[Arrow]) -> Vec<Circle> {
    let mut nodes: BTreeSet<&Path> = BTreeSet::new();
    for a in arrows {
        nodes.insert(&a.from);
        nodes.insert(&a.to);
    }
    let nodes: Vec<&Path> = nodes.into_iter().collect();
    let index_of: BTreeMap<&Path, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for a in arrows {
        next[index_of[a.from.as_path()]].push(index_of[a.to.as_path()]);
    }
    let mut tarjan = Tarjan {
        next: &next,
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        on_stack: vec![false; nodes.len()],
        stack: Vec::new(),
        counter: 0,
        sets: Vec::new(),
    };
    for v in 0..nodes.len() {
        if tarjan.index[v].is_none() {
            tarjan.connect(v);
        }
    }
    let mut out = Vec::new();
    for set in tarjan.sets.into_iter().filter(|s| s.len() > 1) {
        let members: BTreeSet<&Path> = set.iter().map(|&i| nodes[i]).collect();
        let arrows = arrows
            .iter()
            .filter(|a| members.contains(a.from.as_path()) && members.contains(a.to.as_path()))
            .cloned()
            .collect();
        out.push(Circle {
            files: members.into_iter().map(Path::to_path_buf).collect(),
            arrows,
        });
    }
    out.sort_by(|a, b| a.files.cmp(&b.files));
    out
}

struct Tarjan<'a> {
    next: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    counter: usize,
    sets: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn connect(&mut self, v: usize) {
        self.index[v] = Some(self.counter);
        self.low[v] = self.counter;
        self.counter += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &self.next[v] {
            match self.index[w] {
                None => {
                    self.connect(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut set = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                set.push(w);
                if w == v {
                    break;
                }
            }
            self.sets.push(set);
        }
    }
}

/// True for an item compiled only for tests (`#[cfg(test)]`).
fn is_test_only(item: &syn::Item) -> bool {
    let attrs = match item {
        syn::Item::Mod(m) => &m.attrs,
        syn::Item::Use(u) => &u.attrs,
        syn::Item::Fn(f) => &f.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Struct(s) => &s.attrs,
        syn::Item::Enum(e) => &e.attrs,
        syn::Item::Const(c) => &c.attrs,
        syn::Item::Static(s) => &s.attrs,
        syn::Item::Trait(t) => &t.attrs,
        syn::Item::Type(t) => &t.attrs,
        _ => return false,
    };
    cfg_test(attrs)
}

/// True when `attrs` hold `#[cfg(test)]`.
fn cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// Every path a `use` tree names, as segments (a glob or a group ends a path at its prefix).
fn flatten_use(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut p = prefix.clone();
            p.push(n.ident.to_string());
            out.push(p);
        }
        syn::UseTree::Rename(r) => {
            let mut p = prefix.clone();
            p.push(r.ident.to_string());
            out.push(p);
        }
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, out);
            }
        }
    }
}

/// The paths of two segments or more written in an item's code (types, expressions,
/// patterns, trait bounds), and those of `use` declarations inside function bodies.
#[derive(Default)]
struct PathsSeen {
    paths: Vec<Vec<String>>,
}

impl<'ast> Visit<'ast> for PathsSeen {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.segments.len() > 1 {
            self.paths
                .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        flatten_use(&u.tree, &mut Vec::new(), &mut self.paths);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !cfg_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !cfg_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !cfg_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
}

#[cfg(test)]
mod tests;
