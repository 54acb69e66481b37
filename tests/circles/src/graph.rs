//! Circles in a graph of files: the strongly connected sets of two files or more (Tarjan).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

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
