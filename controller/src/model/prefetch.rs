//! Walking a list of shared values while the CPU loads the ones a few steps ahead.
//!
//! Every cycle's build reads the facts of every cached pod, and each pod's facts are an
//! allocation of their own, made when the pod was seen: at 200,000 pods nearly every first
//! read of one misses every cache, and the loop waits on that miss before it can do the next
//! pod's. Naming the next pods' memory early lets those loads overlap with the work on the
//! current pod (BENCHMARKS.md, "Controller", measures what it saves).

/// How many items ahead of the current one to load. Far enough that a miss (about 100 ns)
/// has finished when the loop gets there, near enough that the lines are still cached.
const DISTANCE: usize = 16;

/// Asks the CPU to start loading every cache line of `value`. Only a hint: it reads nothing
/// the program can see, and does nothing on targets without a prefetch instruction here.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let start = std::ptr::from_ref(value).cast::<i8>();
        let mut offset = 0;
        while offset < size_of::<T>() {
            // SAFETY: PREFETCHT0 is a hint that never faults and has no architectural effect,
            // whatever the address; `wrapping_add` forms the address without dereferencing it.
            // (Here the address is always inside `value`, which the reference keeps alive.)
            #[allow(unsafe_code)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(offset));
            }
            offset += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// `items`, in order, each yielded once the value [`DISTANCE`] places later has been asked for
/// with [`prefetch`]. `target` picks what to load for an item (the value behind its pointer),
/// if anything.
pub fn ahead<'a, I, T, U>(
    items: I,
    target: impl Fn(&'a T) -> Option<&'a U>,
) -> impl Iterator<Item = &'a T>
where
    I: Iterator<Item = &'a T> + Clone,
    T: 'a,
    U: 'a,
{
    let mut later = items.clone().skip(DISTANCE);
    items.inspect(move |_| prefetch_next(&mut later, &target))
}

/// Asks for what `target` picks from the next item of `later`, if there is one.
fn prefetch_next<'a, T: 'a, U: 'a>(
    later: &mut impl Iterator<Item = &'a T>,
    target: &impl Fn(&'a T) -> Option<&'a U>,
) {
    if let Some(value) = later.next().and_then(target) {
        prefetch(value);
    }
}

/// Like [`ahead`], for items whose value sits behind two pointers: `near` (the first pointer's
/// target, which holds the second) is asked for twice as far ahead, so that when `far` reads it
/// to find the value it is loaded already, rather than a miss the loop has to wait for.
pub fn ahead_in_two_steps<'a, I, T, U, V>(
    items: I,
    near: impl Fn(&'a T) -> Option<&'a U>,
    far: impl Fn(&'a T) -> Option<&'a V>,
) -> impl Iterator<Item = &'a T>
where
    I: Iterator<Item = &'a T> + Clone,
    T: 'a,
    U: 'a,
    V: 'a,
{
    let mut farther = items.clone().skip(2 * DISTANCE);
    ahead(items, far).inspect(move |_| prefetch_next(&mut farther, &near))
}

/// Drops `items` front to back, asking for what dropping each will write (`target`)
/// [`DISTANCE`] items ahead: releasing a shared value writes its count, one more miss per item.
pub fn drop_ahead<T, U>(items: Vec<T>, target: fn(&T) -> &U) {
    let mut rest = items.into_iter();
    loop {
        if let Some(later) = rest.as_slice().get(DISTANCE) {
            prefetch(target(later));
        }
        match rest.next() {
            Some(item) => drop(item),
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn yields_every_item_once_in_order() {
        for len in [0, 1, DISTANCE - 1, DISTANCE, DISTANCE + 1, 100] {
            let values: Vec<Arc<u64>> = (0..len as u64).map(Arc::new).collect();
            let seen: Vec<u64> = ahead(values.iter(), |v: &Arc<u64>| Some(&**v))
                .map(|v| **v)
                .collect();
            assert_eq!(seen, (0..len as u64).collect::<Vec<_>>(), "length {len}");
        }
    }

    #[test]
    fn two_steps_ahead_yields_every_item_once_in_order() {
        for len in [0, 1, DISTANCE, 2 * DISTANCE, 2 * DISTANCE + 1, 100] {
            let values: Vec<Vec<u64>> = (0..len as u64).map(|v| vec![v]).collect();
            let seen: Vec<u64> = ahead_in_two_steps(values.iter(), Some, |v| v.first())
                .map(|v| v[0])
                .collect();
            assert_eq!(seen, (0..len as u64).collect::<Vec<_>>(), "length {len}");
        }
    }

    #[test]
    fn dropping_ahead_releases_every_item() {
        let shared = Arc::new(5u64);
        let items: Vec<Arc<u64>> = (0..40).map(|_| shared.clone()).collect();
        assert_eq!(Arc::strong_count(&shared), 41);
        drop_ahead(items, |v: &Arc<u64>| &**v);
        assert_eq!(Arc::strong_count(&shared), 1);
    }
}
