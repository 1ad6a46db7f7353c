//! Gradient buckets: parameters grouped into a few large all-reduces instead of one small
//! all-reduce each, laid out the same way on every rank so the collectives match up.

/// PyTorch DDP's default bucket cap (`bucket_cap_mb=25`).
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// PyTorch DDP's first bucket (`dist._DEFAULT_FIRST_BUCKET_BYTES`, 1 MiB): the last layers'
/// gradients, ready first, start their all-reduce early instead of waiting for a full bucket.
pub const FIRST_BUCKET_BYTES: usize = 1 << 20;

/// One parameter's place in its bucket's flat buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Index into the parameter list the plan was made from.
    pub index: usize,
    /// First element of this parameter in the bucket.
    pub offset: usize,
    pub numel: usize,
}

/// Parameters reduced together, packed back to back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub members: Vec<Member>,
    /// Elements in the bucket: the members' sum.
    pub numel: usize,
}

/// The buckets of a model, in the order every rank issues their all-reduces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPlan {
    pub buckets: Vec<Bucket>,
}

impl BucketPlan {
    /// Packs parameters of `numels[i]` elements (of `elem_bytes` each) into buckets, in the
    /// order backward produces their gradients: last to first. The buckets hold at most
    /// `bucket_bytes`, but the first at most `first_bytes` (the last layers' gradients go out
    /// at once) and, at the other end, the last buckets grow from `tail_bytes` (the model's
    /// first parameters), doubling until they would reach `bucket_bytes` (0: no such tail):
    /// the first layers' gradients are done only at the end of backward, so their buckets'
    /// transfers are what nothing hides, and small ones start sooner. A parameter is never
    /// split, and one larger than its bucket's cap gets a bucket of its own. The plan depends
    /// on its arguments only, so every rank computes the same one.
    pub fn new(
        numels: &[usize],
        first_bytes: usize,
        bucket_bytes: usize,
        tail_bytes: usize,
        elem_bytes: usize,
    ) -> BucketPlan {
        let elem = elem_bytes.max(1);
        let cap = bucket_bytes / elem;
        // The tail, packed from the model's first parameter on with caps 1, 2, 4… × tail
        // (at least one element, so that the caps grow).
        let mut next = 0;
        let mut tail: Vec<Bucket> = Vec::new();
        let mut tail_cap = (tail_bytes / elem).max(1);
        while tail_bytes > 0 && tail_cap < cap && next < numels.len() {
            let bucket = fill(numels, next..numels.len(), tail_cap);
            next += bucket.members.len();
            tail.push(bucket);
            tail_cap *= 2;
        }
        // The rest, from the last parameter back, the first bucket smaller.
        let mut buckets = Vec::new();
        let mut end = numels.len();
        while end > next {
            let cap = if buckets.is_empty() {
                first_bytes.min(bucket_bytes) / elem
            } else {
                cap
            };
            let bucket = fill(numels, (next..end).rev(), cap);
            end -= bucket.members.len();
            buckets.push(bucket);
        }
        // The tail in issue order: its last bucket first, each from its last member.
        for mut b in tail.into_iter().rev() {
            b.members.reverse();
            let mut offset = 0;
            for m in &mut b.members {
                m.offset = offset;
                offset += m.numel;
            }
            buckets.push(b);
        }
        BucketPlan { buckets }
    }

    /// Elements over all buckets: the model's parameter count.
    pub fn total_numel(&self) -> usize {
        self.buckets.iter().map(|b| b.numel).sum()
    }

    /// For each parameter index, its bucket (`None` for indices no bucket holds).
    pub fn bucket_of(&self, params: usize) -> Vec<Option<usize>> {
        let mut of = vec![None; params];
        for (b, bucket) in self.buckets.iter().enumerate() {
            for m in &bucket.members {
                if let Some(slot) = of.get_mut(m.index) {
                    *slot = Some(b);
                }
            }
        }
        of
    }
}

/// One bucket of the parameters `indices` yields, in that order, until the next would take
/// it past `cap` elements (a first parameter always goes in).
fn fill(numels: &[usize], indices: impl Iterator<Item = usize>, cap: usize) -> Bucket {
    let mut b = Bucket {
        members: Vec::new(),
        numel: 0,
    };
    for index in indices {
        let numel = numels[index];
        if !b.members.is_empty() && b.numel + numel > cap {
            break;
        }
        b.members.push(Member {
            index,
            offset: b.numel,
            numel,
        });
        b.numel += numel;
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn indices(p: &BucketPlan) -> Vec<Vec<usize>> {
        p.buckets
            .iter()
            .map(|b| b.members.iter().map(|m| m.index).collect())
            .collect()
    }

    #[test]
    fn packs_from_the_last_parameter() {
        // Cap 100 f32 elements = 400 bytes.
        let p = BucketPlan::new(&[10, 60, 30, 50, 40], 400, 400, 0, 4);
        assert_eq!(indices(&p), vec![vec![4, 3], vec![2, 1, 0]]);
        assert_eq!(
            p.buckets[1].members,
            vec![
                Member {
                    index: 2,
                    offset: 0,
                    numel: 30
                },
                Member {
                    index: 1,
                    offset: 30,
                    numel: 60
                },
                Member {
                    index: 0,
                    offset: 90,
                    numel: 10
                },
            ]
        );
        assert_eq!(p.total_numel(), 190);
    }

    #[test]
    fn oversized_parameter_stands_alone() {
        let p = BucketPlan::new(&[5, 500, 5], 100, 100, 0, 1);
        assert_eq!(indices(&p), vec![vec![2], vec![1], vec![0]]);
        assert_eq!(BucketPlan::new(&[], 100, 100, 0, 4).buckets, vec![]);
        // A cap below one element still places every parameter.
        assert_eq!(BucketPlan::new(&[1, 2], 3, 3, 0, 4).buckets.len(), 2);
    }

    #[test]
    fn first_bucket_is_small() {
        // First bucket 100 bytes (25 elements), the rest 400 (100).
        let p = BucketPlan::new(&[10, 60, 30, 20, 10], 100, 400, 0, 4);
        assert_eq!(indices(&p), vec![vec![4], vec![3, 2], vec![1, 0]]);
        // A first cap above the others' is cut to theirs.
        let q = BucketPlan::new(&[10, 60, 30, 20, 10], 4000, 400, 0, 4);
        assert_eq!(q, BucketPlan::new(&[10, 60, 30, 20, 10], 400, 400, 0, 4));
    }

    #[test]
    fn last_buckets_grow_from_the_tail_cap() {
        // Tail caps 10, 20, 40 elements (40 bytes doubling), then the 100-element cap.
        let numels = [4, 6, 5, 12, 9, 30, 50, 70, 80];
        let p = BucketPlan::new(&numels, 400, 400, 40, 4);
        // From the model's start: [0, 1] (10), [2, 3] (17 ≤ 20), [4, 5] (39 ≤ 40); then from
        // the end back: [8] (80, then 70 > 100), [7] (70, then 50 > 100), [6] (50).
        assert_eq!(
            indices(&p),
            vec![
                vec![8],
                vec![7],
                vec![6],
                vec![5, 4],
                vec![3, 2],
                vec![1, 0]
            ]
        );
        assert_eq!(p.buckets[3].members[1].offset, 30);
        assert_eq!(p.bucket_of(10)[9], None);
        assert_eq!(p.bucket_of(10)[0], Some(5));
        // A model smaller than the tail cap is one bucket.
        assert_eq!(BucketPlan::new(&[3, 4], 400, 400, 40, 4).buckets.len(), 1);
        // A tail under one element is one element, doubling: caps 1, 2, 4, then 8.
        let p = BucketPlan::new(&[1, 1, 2, 3, 1, 8], 32, 32, 1, 4);
        assert_eq!(
            indices(&p),
            vec![vec![5], vec![4, 3], vec![2], vec![1], vec![0]]
        );
    }

    proptest! {
        #[test]
        fn plan_invariants(numels in proptest::collection::vec(0usize..5000, 0..60),
                           cap_bytes in 0usize..40_000, first_bytes in 0usize..40_000,
                           tail_bytes in 0usize..10_000, elem in 1usize..5) {
            let p = BucketPlan::new(&numels, first_bytes, cap_bytes, tail_bytes, elem);
            let cap = cap_bytes / elem;
            let first = first_bytes.min(cap_bytes) / elem;
            prop_assert_eq!(&p, &BucketPlan::new(&numels, first_bytes, cap_bytes, tail_bytes, elem));
            // Issue order is the parameters reversed, each exactly once.
            let order: Vec<usize> = indices(&p).concat();
            prop_assert_eq!(order, (0..numels.len()).rev().collect::<Vec<_>>());
            prop_assert_eq!(p.total_numel(), numels.iter().sum::<usize>());
            for b in &p.buckets {
                prop_assert!(!b.members.is_empty());
                let mut next = 0;
                for m in &b.members {
                    prop_assert_eq!(m.offset, next);
                    prop_assert_eq!(m.numel, numels[m.index]);
                    next += m.numel;
                }
                prop_assert_eq!(b.numel, next);
            }
            // The tail: the last buckets, capped at tail, 2·tail, 4·tail… from the end, each
            // cap below the common one; before it, the first bucket and then the common cap.
            let mut tail_caps = Vec::new();
            let mut c = (tail_bytes / elem).max(1);
            while tail_bytes > 0 && c < cap {
                tail_caps.push(c);
                c *= 2;
            }
            let n = p.buckets.len();
            let tail_len = tail_caps.len().min(n);
            for (i, b) in p.buckets.iter().enumerate() {
                let from_end = n - 1 - i;
                let in_tail = from_end < tail_len;
                let cap_i = if in_tail { tail_caps[from_end] } else if i == 0 { first } else { cap };
                prop_assert!(b.numel <= cap_i || b.members.len() == 1);
                // Greedy at the head: a bucket closes only when the next parameter would not fit.
                if !in_tail && i + 1 < n - tail_len {
                    prop_assert!(b.numel + p.buckets[i + 1].members[0].numel > cap_i);
                }
            }
        }
    }
}
