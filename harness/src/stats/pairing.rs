//! Pairs runs of two arms that ran next to each other.
//!
//! In an interleaved session (A B B A A B B A …) neighbouring runs share the
//! machine's state of the moment (thermal, frequency, background load), so
//! B − A within a pair cancels most of the drift between sessions that makes
//! absolute numbers move by 10–35% (run-to-run spread of `rig run` on the
//! same build, measured while building `rig ab`).

/// Pairs adjacent runs of arms `a` and `b`, in run order, as `(a, b)` values.
///
/// `order` is the whole session, `(arm, value)` per run. Runs of other arms
/// are skipped, so with three arms (A B C C B A) A and C still pair. Walking
/// the remaining runs, two neighbours of different arms form a pair and are
/// both consumed; a run whose next neighbour is of its own arm stays unpaired.
/// A B B A gives (A1, B1) and (A2, B2); A B B A A B B A gives four pairs; a
/// trailing unmatched run (A B B A A) is left out.
pub fn pair_blocks(order: &[(usize, f64)], a: usize, b: usize) -> Vec<(f64, f64)> {
    let runs: Vec<(usize, f64)> = order
        .iter()
        .copied()
        .filter(|&(arm, _)| arm == a || arm == b)
        .collect();
    let mut pairs = Vec::with_capacity(runs.len() / 2);
    let mut i = 0;
    while i + 1 < runs.len() {
        let ((x_arm, x), (y_arm, y)) = (runs[i], runs[i + 1]);
        if x_arm == y_arm {
            i += 1;
            continue;
        }
        pairs.push(if x_arm == a { (x, y) } else { (y, x) });
        i += 2;
    }
    pairs
}

/// B − A for each `(a, b)` pair.
pub fn paired_diffs(pairs: &[(f64, f64)]) -> Vec<f64> {
    pairs.iter().map(|&(a, b)| b - a).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abba_block_gives_two_pairs_in_run_order() {
        let order = [(0, 1.0), (1, 2.0), (1, 3.0), (0, 4.0)];
        assert_eq!(pair_blocks(&order, 0, 1), vec![(1.0, 2.0), (4.0, 3.0)]);
        assert_eq!(paired_diffs(&pair_blocks(&order, 0, 1)), vec![1.0, -1.0]);
    }

    #[test]
    fn two_abba_blocks_give_four_pairs() {
        let order = [
            (0, 10.0),
            (1, 11.0),
            (1, 12.0),
            (0, 13.0),
            (0, 14.0),
            (1, 15.0),
            (1, 16.0),
            (0, 17.0),
        ];
        assert_eq!(
            pair_blocks(&order, 0, 1),
            vec![(10.0, 11.0), (13.0, 12.0), (14.0, 15.0), (17.0, 16.0)]
        );
    }

    #[test]
    fn swapping_the_arms_swaps_the_pair_members() {
        let order = [(0, 1.0), (1, 2.0), (1, 3.0), (0, 4.0)];
        assert_eq!(pair_blocks(&order, 1, 0), vec![(2.0, 1.0), (3.0, 4.0)]);
    }

    #[test]
    fn third_arm_runs_are_skipped_over() {
        // A B C C B A: A pairs with C across B, and B with C.
        let order = [(0, 1.0), (1, 2.0), (2, 3.0), (2, 4.0), (1, 5.0), (0, 6.0)];
        assert_eq!(pair_blocks(&order, 0, 2), vec![(1.0, 3.0), (6.0, 4.0)]);
        assert_eq!(pair_blocks(&order, 1, 2), vec![(2.0, 3.0), (5.0, 4.0)]);
    }

    #[test]
    fn unmatched_runs_stay_unpaired() {
        let trailing = [(0, 1.0), (1, 2.0), (1, 3.0), (0, 4.0), (0, 5.0)];
        assert_eq!(pair_blocks(&trailing, 0, 1).len(), 2);
        let grouped = [(0, 1.0), (0, 2.0), (1, 3.0), (1, 4.0)];
        assert_eq!(pair_blocks(&grouped, 0, 1), vec![(2.0, 3.0)]);
        assert!(pair_blocks(&grouped, 0, 0).is_empty());
        assert!(pair_blocks(&[], 0, 1).is_empty());
    }
}
