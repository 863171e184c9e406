//! Items grouped by a dense index, stored in one list rather than in a list per group.
//!
//! The build groups waiting pods by workload, and at scale nearly every workload is one pod:
//! 200,000 waiting pods are about 180,000 workloads. A list per workload cost an allocation
//! each in the build, a free each when the snapshot was dropped, and one more pointer to follow
//! (a likely cache miss) on the way from a workload to its pods while planning. Here a
//! workload's pods are a slice of one list, found through one table of offsets.

use std::ops::Index;

/// Items in groups `0..groups()`, each group's items in the order they arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct Grouped<T> {
    items: Vec<T>,
    /// Group `g`'s items are `items[starts[g]..starts[g + 1]]`: one entry more than groups.
    starts: Vec<usize>,
}

impl<T> Default for Grouped<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            starts: vec![0],
        }
    }
}

impl<T> Grouped<T> {
    /// Groups `arrivals`, each `(group, item)`, into `groups` groups (more if an arrival names
    /// a later group), keeping the arrival order within each group. A group no item names is
    /// empty.
    pub fn from_arrivals(groups: usize, arrivals: Vec<(usize, T)>) -> Self {
        let groups = arrivals
            .iter()
            .map(|&(group, _)| group + 1)
            .max()
            .map_or(groups, |named| named.max(groups));
        let mut starts = vec![0; groups + 1];
        for &(group, _) in &arrivals {
            starts[group + 1] += 1;
        }
        for g in 0..groups {
            starts[g + 1] += starts[g];
        }
        // Pods arrive in the pod store's order, and only a gang's pods can arrive apart from
        // each other; without gangs apart, the arrivals are the list already.
        if arrivals.is_sorted_by_key(|&(group, _)| group) {
            let items = arrivals.into_iter().map(|(_, item)| item).collect();
            return Self { items, starts };
        }
        let mut next = starts[..groups].to_vec();
        let mut slots: Vec<Option<T>> = std::iter::repeat_with(|| None)
            .take(arrivals.len())
            .collect();
        for (group, item) in arrivals {
            slots[next[group]] = Some(item);
            next[group] += 1;
        }
        // Every slot was filled once: the counts above gave each group exactly its room.
        let items = slots.into_iter().flatten().collect();
        Self { items, starts }
    }

    /// How many groups there are (empty ones included).
    pub fn groups(&self) -> usize {
        self.starts.len() - 1
    }

    /// Group `group`'s items, or `None` past the last group.
    pub fn get(&self, group: usize) -> Option<&[T]> {
        let start = *self.starts.get(group)?;
        let end = *self.starts.get(group + 1)?;
        self.items.get(start..end)
    }

    /// Every group's items, in group order.
    pub fn iter(&self) -> impl Iterator<Item = &[T]> {
        self.starts
            .windows(2)
            .map(|bounds| &self.items[bounds[0]..bounds[1]])
    }

    /// Every item, group by group.
    pub fn into_items(self) -> Vec<T> {
        self.items
    }
}

impl<T> Index<usize> for Grouped<T> {
    type Output = [T];

    /// Group `group`'s items; panics past the last group, as a slice index does.
    fn index(&self, group: usize) -> &[T] {
        &self.items[self.starts[group]..self.starts[group + 1]]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The same grouping, one list per group.
    fn by_lists(groups: usize, arrivals: &[(usize, u32)]) -> Vec<Vec<u32>> {
        let count = arrivals.iter().map(|&(g, _)| g + 1).max().unwrap_or(0);
        let mut lists = vec![Vec::new(); groups.max(count)];
        for &(group, item) in arrivals {
            lists[group].push(item);
        }
        lists
    }

    #[test]
    fn interleaved_groups_keep_their_arrival_order() {
        let grouped = Grouped::from_arrivals(4, vec![(0, 10), (2, 20), (0, 11), (1, 30), (2, 21)]);
        assert_eq!(grouped.groups(), 4);
        assert_eq!(&grouped[0], &[10, 11]);
        assert_eq!(&grouped[1], &[30]);
        assert_eq!(&grouped[2], &[20, 21]);
        assert!(grouped[3].is_empty());
        assert_eq!(grouped.get(4), None);
        assert_eq!(grouped.into_items(), vec![10, 11, 30, 20, 21]);
    }

    #[test]
    fn empty_has_no_groups() {
        let grouped: Grouped<u32> = Grouped::default();
        assert_eq!(grouped.groups(), 0);
        assert_eq!(grouped.get(0), None);
        assert_eq!(grouped.iter().count(), 0);
        assert_eq!(Grouped::<u32>::from_arrivals(0, Vec::new()), grouped);
    }

    #[test]
    fn an_arrival_past_the_count_adds_groups() {
        let grouped = Grouped::from_arrivals(1, vec![(3, 7)]);
        assert_eq!(grouped.groups(), 4);
        assert_eq!(grouped.get(3), Some(&[7][..]));
    }

    proptest! {
        #[test]
        fn matches_one_list_per_group(
            groups in 0usize..12,
            arrivals in proptest::collection::vec((0usize..16, any::<u32>()), 0..64),
        ) {
            let lists = by_lists(groups, &arrivals);
            let grouped = Grouped::from_arrivals(groups, arrivals);
            prop_assert_eq!(grouped.groups(), lists.len());
            let seen: Vec<Vec<u32>> = grouped.iter().map(<[u32]>::to_vec).collect();
            prop_assert_eq!(&seen, &lists);
            for (g, list) in lists.iter().enumerate() {
                prop_assert_eq!(grouped.get(g), Some(list.as_slice()));
            }
        }
    }
}
