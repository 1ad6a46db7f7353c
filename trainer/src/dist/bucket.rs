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
    /// Packs parameters of `numels[i]` elements (of `elem_bytes` each) into buckets, taken
    /// last to first, as backward produces the last layers' gradients first: see
    /// [`BucketPlan::in_order`].
    pub fn new(
        numels: &[usize],
        first_bytes: usize,
        bucket_bytes: usize,
        elem_bytes: usize,
    ) -> BucketPlan {
        let order: Vec<usize> = (0..numels.len()).rev().collect();
        Self::in_order(&order, numels, first_bytes, bucket_bytes, elem_bytes)
    }

    /// Packs the parameters `order` lists (indices into `numels`, each once), in that order,
    /// greedily into buckets of at most `bucket_bytes`, the first of at most `first_bytes`; a
    /// parameter is never split, and one larger than the cap gets a bucket of its own. The
    /// plan depends on its arguments only, so ranks that pass the same ones compute the same
    /// plan.
    pub fn in_order(
        order: &[usize],
        numels: &[usize],
        first_bytes: usize,
        bucket_bytes: usize,
        elem_bytes: usize,
    ) -> BucketPlan {
        let elem = elem_bytes.max(1);
        let cap = |buckets: &[Bucket]| {
            if buckets.is_empty() {
                first_bytes.min(bucket_bytes) / elem
            } else {
                bucket_bytes / elem
            }
        };
        let mut buckets = Vec::new();
        let mut cur = Bucket {
            members: Vec::new(),
            numel: 0,
        };
        for &index in order {
            let numel = numels[index];
            if !cur.members.is_empty() && cur.numel + numel > cap(&buckets) {
                let full = std::mem::replace(
                    &mut cur,
                    Bucket {
                        members: Vec::new(),
                        numel: 0,
                    },
                );
                buckets.push(full);
            }
            cur.members.push(Member {
                index,
                offset: cur.numel,
                numel,
            });
            cur.numel += numel;
        }
        if !cur.members.is_empty() {
            buckets.push(cur);
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
        let p = BucketPlan::new(&[10, 60, 30, 50, 40], 400, 400, 4);
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
        let p = BucketPlan::new(&[5, 500, 5], 100, 100, 1);
        assert_eq!(indices(&p), vec![vec![2], vec![1], vec![0]]);
        assert_eq!(BucketPlan::new(&[], 100, 100, 4).buckets, vec![]);
        // A cap below one element still places every parameter.
        assert_eq!(BucketPlan::new(&[1, 2], 3, 3, 4).buckets.len(), 2);
    }

    #[test]
    fn first_bucket_is_small() {
        // First bucket 100 bytes (25 elements), the rest 400 (100).
        let p = BucketPlan::new(&[10, 60, 30, 20, 10], 100, 400, 4);
        assert_eq!(indices(&p), vec![vec![4], vec![3, 2], vec![1, 0]]);
        // A first cap above the others' is cut to theirs.
        let q = BucketPlan::new(&[10, 60, 30, 20, 10], 4000, 400, 4);
        assert_eq!(q, BucketPlan::new(&[10, 60, 30, 20, 10], 400, 400, 4));
    }

    #[test]
    fn packs_in_the_order_given() {
        let p = BucketPlan::in_order(&[1, 3, 0, 2], &[10, 20, 30, 40], 240, 240, 4);
        assert_eq!(indices(&p), vec![vec![1, 3], vec![0, 2]]);
        assert_eq!(
            p.bucket_of(5),
            vec![Some(1), Some(0), Some(1), Some(0), None]
        );
    }

    proptest! {
        #[test]
        fn plan_invariants(numels in proptest::collection::vec(0usize..5000, 0..60),
                           cap_bytes in 0usize..40_000, first_bytes in 0usize..40_000,
                           elem in 1usize..5) {
            let p = BucketPlan::new(&numels, first_bytes, cap_bytes, elem);
            let cap = cap_bytes / elem;
            let first = first_bytes.min(cap_bytes) / elem;
            prop_assert_eq!(&p, &BucketPlan::new(&numels, first_bytes, cap_bytes, elem));
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
            for (i, b) in p.buckets.iter().enumerate() {
                let cap = if i == 0 { first } else { cap };
                prop_assert!(b.numel <= cap || b.members.len() == 1);
                // Greedy: a bucket closes only when the next parameter would not fit.
                if let Some(next) = p.buckets.get(i + 1) {
                    prop_assert!(b.numel + next.members[0].numel > cap);
                }
            }
        }
    }
}
