//! Typed positions: a vector indexed by one kind of index only.
//!
//! A snapshot numbers its pools, nodes and queues by position, and much of a cycle's state is a
//! vector with one entry per pool, node or queue. Each kind gets its own index type
//! ([`crate::snapshot::NodeId`] and the others) and such vectors are [`IndexVec`]s, so the
//! compiler refuses a pool index where a node index is wanted. Both are plain `usize` and `Vec`
//! underneath.
//!
//! ```
//! use gpufair_core::snapshot::{NodeId, Snapshot};
//! let snapshot = Snapshot::default();
//! assert!(snapshot.nodes.get(NodeId::new(0)).is_none());
//! ```
//!
//! ```compile_fail
//! use gpufair_core::snapshot::{PoolId, Snapshot};
//! let snapshot = Snapshot::default();
//! let _ = snapshot.nodes.get(PoolId::new(0));
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// A position of one kind.
pub trait Idx: Copy {
    /// The index at position `index`.
    fn new(index: usize) -> Self;
    /// Its position.
    fn index(self) -> usize;
}

/// Declares an index type: a `usize` that only indexes [`IndexVec`]s of its own kind.
macro_rules! index_type {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(usize);

        impl $name {
            /// The index at position `index`.
            pub const fn new(index: usize) -> Self {
                Self(index)
            }

            /// Its position.
            pub const fn get(self) -> usize {
                self.0
            }
        }

        impl $crate::index::Idx for $name {
            fn new(index: usize) -> Self {
                Self(index)
            }

            fn index(self) -> usize {
                self.0
            }
        }
    };
}
pub(crate) use index_type;

/// A `Vec<T>` indexed by `I` only.
pub struct IndexVec<I, T> {
    raw: Vec<T>,
    index: PhantomData<fn(&I)>,
}

impl<I: Idx, T> IndexVec<I, T> {
    /// An empty vector.
    pub const fn new() -> Self {
        Self::from_raw(Vec::new())
    }

    /// The vector `raw`, its first element at index 0.
    pub const fn from_raw(raw: Vec<T>) -> Self {
        Self {
            raw,
            index: PhantomData,
        }
    }

    /// An empty vector with room for `capacity` elements.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::from_raw(Vec::with_capacity(capacity))
    }

    /// `len` copies of `value`.
    pub fn from_elem(value: T, len: usize) -> Self
    where
        T: Clone,
    {
        Self::from_raw(vec![value; len])
    }

    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Whether `index` is a position of this vector.
    pub fn contains(&self, index: I) -> bool {
        index.index() < self.raw.len()
    }

    /// Appends `value` and returns its index.
    pub fn push(&mut self, value: T) -> I {
        let index = I::new(self.raw.len());
        self.raw.push(value);
        index
    }

    pub fn get(&self, index: I) -> Option<&T> {
        self.raw.get(index.index())
    }

    pub fn get_mut(&mut self, index: I) -> Option<&mut T> {
        self.raw.get_mut(index.index())
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.raw.iter()
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.raw.iter_mut()
    }

    /// Each element with its index.
    pub fn iter_enumerated(&self) -> impl DoubleEndedIterator<Item = (I, &T)> + Clone {
        self.raw.iter().enumerate().map(|(i, t)| (I::new(i), t))
    }

    /// Every index, in order.
    pub fn indices(&self) -> impl DoubleEndedIterator<Item = I> + Clone + use<I, T> {
        (0..self.raw.len()).map(I::new)
    }

    /// The elements, first at index 0.
    pub fn as_slice(&self) -> &[T] {
        &self.raw
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.raw
    }
}

impl<I: Idx, T> Index<I> for IndexVec<I, T> {
    type Output = T;

    #[inline]
    fn index(&self, index: I) -> &T {
        &self.raw[index.index()]
    }
}

impl<I: Idx, T> IndexMut<I> for IndexVec<I, T> {
    #[inline]
    fn index_mut(&mut self, index: I) -> &mut T {
        &mut self.raw[index.index()]
    }
}

impl<I, T: Clone> Clone for IndexVec<I, T> {
    fn clone(&self) -> Self {
        Self {
            raw: self.raw.clone(),
            index: PhantomData,
        }
    }
}

impl<I, T: PartialEq> PartialEq for IndexVec<I, T> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<I, T> Default for IndexVec<I, T> {
    fn default() -> Self {
        Self {
            raw: Vec::new(),
            index: PhantomData,
        }
    }
}

impl<I, T: fmt::Debug> fmt::Debug for IndexVec<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.raw.fmt(f)
    }
}

impl<I: Idx, T> From<Vec<T>> for IndexVec<I, T> {
    fn from(raw: Vec<T>) -> Self {
        Self::from_raw(raw)
    }
}

impl<I: Idx, T> FromIterator<T> for IndexVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        Self::from_raw(iter.into_iter().collect())
    }
}

impl<I, T> IntoIterator for IndexVec<I, T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;

    fn into_iter(self) -> Self::IntoIter {
        self.raw.into_iter()
    }
}

impl<'a, I, T> IntoIterator for &'a IndexVec<I, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.raw.iter()
    }
}

impl<'a, I, T> IntoIterator for &'a mut IndexVec<I, T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.raw.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    index_type!(
        /// A test index.
        AIx
    );

    #[test]
    fn push_returns_the_index_that_reads_the_value_back() {
        let mut v: IndexVec<AIx, &str> = IndexVec::new();
        let a = v.push("a");
        let b = v.push("b");
        assert_eq!((a.get(), b.get()), (0, 1));
        assert_eq!((v[a], v[b]), ("a", "b"));
        assert!(v.contains(b));
        assert!(!v.contains(AIx::new(2)));
        assert_eq!(v.get(AIx::new(2)), None);
        assert_eq!(v.indices().collect::<Vec<_>>(), vec![a, b]);
        assert_eq!(
            v.iter_enumerated().collect::<Vec<_>>(),
            vec![(a, &"a"), (b, &"b")]
        );
    }

    #[test]
    fn an_index_is_a_usize_underneath() {
        assert_eq!(size_of::<AIx>(), size_of::<usize>());
        assert_eq!(size_of::<IndexVec<AIx, u8>>(), size_of::<Vec<u8>>());
    }
}
