//! What the reader takes from Rust syntax: `use` trees, the paths written in code and inside
//! macro calls, the names a module declares, and whether an item is test code.

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::Visit;

/// True for an item compiled only for tests (`#[cfg(test)]`).
pub(crate) fn is_test_only(item: &syn::Item) -> bool {
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

/// One name a `use` tree brings in: the path it names and the name it is known by here
/// (`None` for a glob, whose path names a module).
#[derive(Debug, Clone)]
pub(crate) struct Used {
    pub path: Vec<String>,
    pub alias: Option<String>,
}

/// Every name a `use` tree brings in.
pub(crate) fn flatten_use(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Used>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            let name = n.ident.to_string();
            if name == "self" {
                // `use a::b::{self}` names `a::b`, known as `b`.
                let alias = path.last().cloned();
                out.push(Used { path, alias });
            } else {
                path.push(name.clone());
                out.push(Used {
                    path,
                    alias: Some(name),
                });
            }
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            path.push(r.ident.to_string());
            out.push(Used {
                path,
                alias: Some(r.rename.to_string()),
            });
        }
        syn::UseTree::Glob(_) => out.push(Used {
            path: prefix.clone(),
            alias: None,
        }),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, out);
            }
        }
    }
}

/// The name an item declares in its module (`None` for `use`, `impl` and the like).
pub(crate) fn declared_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Mod(i) => &i.ident,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// The paths of two segments or more written in an item's code (types, expressions,
/// patterns, trait bounds, and the tokens of macro calls such as `json!` or `format!`), and
/// those of `use` declarations inside function bodies. Test code is left out.
#[derive(Default)]
pub(crate) struct PathsSeen {
    pub paths: Vec<Vec<String>>,
    /// Paths of one segment (a name brought in by a `use`, or a local one).
    pub idents: Vec<String>,
}

impl<'ast> Visit<'ast> for PathsSeen {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.segments.len() > 1 {
            self.paths
                .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        } else if let Some(s) = p.segments.first() {
            self.idents.push(s.ident.to_string());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        token_paths(m.tokens.clone(), &mut self.paths);
        syn::visit::visit_macro(self, m);
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut used = Vec::new();
        flatten_use(&u.tree, &mut Vec::new(), &mut used);
        self.paths.extend(used.into_iter().map(|u| u.path));
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

/// The `a::b::c` sequences of identifiers in a macro call's tokens (its arguments are not
/// parsed as Rust, so the visitor does not see them).
fn token_paths(tokens: TokenStream, out: &mut Vec<Vec<String>>) {
    let mut current: Vec<String> = Vec::new();
    // Whether the last tokens were `::`, so the next identifier continues `current`.
    let mut after_colons = false;
    let mut colons = 0;
    let flush = |current: &mut Vec<String>, out: &mut Vec<Vec<String>>| {
        if current.len() > 1 {
            out.push(std::mem::take(current));
        } else {
            current.clear();
        }
    };
    for tt in tokens {
        match tt {
            TokenTree::Ident(i) => {
                if !after_colons {
                    flush(&mut current, out);
                }
                current.push(i.to_string());
                after_colons = false;
                colons = 0;
            }
            TokenTree::Punct(p) if p.as_char() == ':' => {
                colons += 1;
                if colons == 2 {
                    after_colons = true;
                } else if p.spacing() == Spacing::Alone {
                    // A lone `:` (a struct field, a JSON key): the path ends.
                    flush(&mut current, out);
                    colons = 0;
                }
            }
            TokenTree::Group(g) => {
                flush(&mut current, out);
                after_colons = false;
                colons = 0;
                token_paths(g.stream(), out);
            }
            _ => {
                flush(&mut current, out);
                after_colons = false;
                colons = 0;
            }
        }
    }
    flush(&mut current, out);
}

/// True for a `use` that re-exports (any `pub` visibility): a module's facade, not an import.
pub(crate) fn is_reexport(u: &syn::ItemUse) -> bool {
    !matches!(u.vis, syn::Visibility::Inherited)
}
