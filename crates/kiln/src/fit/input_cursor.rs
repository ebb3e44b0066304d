//! The training input's position, kept so that a resumed run sees exactly the batches an
//! uninterrupted one would have seen.
//!
//! kiln-data's random stages (shuffle, random maps) draw their seeds from `(seed, number of
//! iterations started)`, so the position is two counters: iterators started and batches taken
//! from the current one ([`InputPosition`]). Restoring replays them on a freshly built dataset:
//! the earlier iterators are started and dropped (cheap: nothing is read), and the batches
//! already trained in the current one are read again and discarded (input work only, no
//! training).

use kiln_data::{Dataset, DatasetIter, Element, MAX_LISTED_SKIPS, SkipStats};

use crate::checkpoint::InputPosition;
use crate::error::Result;

/// An iterator over `Dataset` that counts where it is.
pub(crate) struct InputCursor<'a> {
    dataset: &'a Dataset,
    current: Option<DatasetIter>,
    position: InputPosition,
    /// Records skipped (`ignore_errors`) and not yet taken by [`InputCursor::take_skips`];
    /// `None` while no skipping stage has run.
    skips: Option<SkipStats>,
    /// How many of the current iterator's skips are already in `skips`.
    skips_taken: u64,
}

impl<'a> InputCursor<'a> {
    /// A cursor at `position` of `dataset` (a default position is the start).
    ///
    /// # Errors
    /// Data errors from the replayed batches.
    pub fn restore(dataset: &'a Dataset, position: InputPosition) -> Result<InputCursor<'a>> {
        let open = u64::from(position.open);
        for _ in 0..position.iterators_started.saturating_sub(open) {
            drop(dataset.iter());
        }
        let mut current = None;
        if position.open {
            let mut it = dataset.iter();
            for _ in 0..position.batches_taken {
                if let Some(batch) = it.next() {
                    batch?;
                }
            }
            current = Some(it);
        }
        Ok(InputCursor {
            dataset,
            current,
            position,
            skips: None,
            skips_taken: 0,
        })
    }

    /// Moves to `position` (a NaN rollback): as [`InputCursor::restore`] on the same dataset,
    /// whose random stages have since moved on, so the batches are new ones.
    ///
    /// # Errors
    /// Data errors from the replayed batches.
    pub fn reposition(&mut self, position: InputPosition) -> Result<()> {
        *self = InputCursor::restore(self.dataset, position)?;
        Ok(())
    }

    /// Where the cursor is.
    pub fn position(&self) -> InputPosition {
        self.position
    }

    /// The records the input's `ignore_errors` stages dropped since the last call (or since
    /// the cursor was made): their count and the first few; `None` when no such stage ran.
    pub fn take_skips(&mut self) -> Option<SkipStats> {
        self.gather_skips();
        self.skips.take()
    }

    /// Moves the current iterator's new skips into `skips`.
    fn gather_skips(&mut self) {
        let Some(now) = self.current.as_ref().and_then(DatasetIter::skip_stats) else {
            return;
        };
        let skips = self.skips.get_or_insert_with(SkipStats::default);
        skips.count += now.count.saturating_sub(self.skips_taken);
        // The iterator lists its first skips: entry `i` is its skip number `i + 1`.
        let new = now.first.into_iter().skip(self.skips_taken as usize);
        let room = MAX_LISTED_SKIPS.saturating_sub(skips.first.len());
        skips.first.extend(new.take(room));
        self.skips_taken = now.count;
    }

    /// Ends the current iterator (an epoch's pass is over).
    pub fn close(&mut self) {
        self.gather_skips();
        self.skips_taken = 0;
        self.current = None;
        self.position.open = false;
        self.position.batches_taken = 0;
    }

    /// Whether no batch was taken from the current iterator (or none is open).
    pub fn at_start(&self) -> bool {
        !self.position.open || self.position.batches_taken == 0
    }

    /// The next batch, starting a new iterator when none is open; `None` when the current one
    /// is exhausted (it is then closed).
    pub fn next_batch(&mut self) -> Option<Result<Element>> {
        let it = self.open();
        match it.next() {
            Some(batch) => {
                self.position.batches_taken += 1;
                Some(batch.map_err(Into::into))
            }
            None => {
                self.close();
                None
            }
        }
    }

    /// [`InputCursor::next_batch`] for a worker of a multi-worker job that reads its own shard:
    /// once the current iterator is exhausted it stays open and every further call returns
    /// `None` while still counting a batch, so that the position counts the epoch's *steps*,
    /// which are the same on every worker (the others may still have data). Restoring that
    /// position on any worker replays its own shard up to that step (or to its end).
    /// [`InputCursor::close`] ends the pass as usual.
    pub fn next_step_batch(&mut self) -> Option<Result<Element>> {
        let batch = self.open().next();
        self.position.batches_taken += 1;
        batch.map(|b| b.map_err(Into::into))
    }

    /// The current iterator, starting a new one (a new pass) when none is open.
    fn open(&mut self) -> &mut DatasetIter {
        if self.current.is_none() {
            self.skips_taken = 0;
            self.current = Some(self.dataset.iter());
            self.position.iterators_started += 1;
            self.position.batches_taken = 0;
            self.position.open = true;
        }
        self.current.as_mut().expect("opened above")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_data::{Array, Buffer, Element};

    fn dataset() -> Dataset {
        let x = Array::new(vec![10], Buffer::F32((0..10).map(|v| v as f32).collect())).unwrap();
        Dataset::from_tensor_slices(Element::new().with("x", x))
            .unwrap()
            .shuffle(10, Some(3), true)
            .batch(3, false)
    }

    /// A batch's first value, -1 for none.
    fn first(batch: Option<Result<Element>>) -> f32 {
        match batch {
            Some(b) => b
                .unwrap()
                .require("x")
                .unwrap()
                .data()
                .try_to_f32()
                .unwrap()[0],
            None => -1.0,
        }
    }

    fn firsts(c: &mut InputCursor, n: usize) -> Vec<f32> {
        (0..n).map(|_| first(c.next_batch())).collect()
    }

    #[test]
    fn a_restored_cursor_continues_with_the_same_batches() {
        let ds = dataset();
        let mut a = InputCursor::restore(&ds, InputPosition::default()).unwrap();
        // Two passes of 4 batches (3 + 3 + 3 + 1), then the third pass's first batches.
        let all = firsts(&mut a, 13);
        assert_eq!(all[4], -1.0, "the first pass ends after 4 batches");
        for cut in [1, 4, 5, 7, 11] {
            let ds2 = dataset();
            let mut b = InputCursor::restore(&ds2, InputPosition::default()).unwrap();
            let head = firsts(&mut b, cut);
            let fresh = dataset();
            let mut c = InputCursor::restore(&fresh, b.position()).unwrap();
            let tail = firsts(&mut c, 13 - cut);
            assert_eq!([head, tail].concat(), all, "cut after {cut}");
        }
    }

    /// A shard's cursor counts steps past its own end, and a position taken there (or from a
    /// worker whose shard is longer) restores to the same place: the end, then a new pass.
    #[test]
    fn step_positions_count_past_the_end_of_a_short_shard() {
        let ds = dataset();
        let mut a = InputCursor::restore(&ds, InputPosition::default()).unwrap();
        let step = |c: &mut InputCursor| first(c.next_step_batch());
        let first: Vec<f32> = (0..6).map(|_| step(&mut a)).collect();
        assert_eq!(
            &first[4..],
            [-1.0, -1.0],
            "4 batches, then nothing while held"
        );
        assert_eq!(a.position().batches_taken, 6);
        assert!(a.position().open);
        // Restored at step 6 (e.g. from a worker with a longer shard): still exhausted.
        let ds2 = dataset();
        let mut b = InputCursor::restore(&ds2, a.position()).unwrap();
        assert_eq!(step(&mut b), -1.0);
        // Restored at step 2: the same third and fourth batches.
        let ds3 = dataset();
        let mut c = InputCursor::restore(&ds3, InputPosition::default()).unwrap();
        let _ = (step(&mut c), step(&mut c));
        let ds4 = dataset();
        let mut d = InputCursor::restore(&ds4, c.position()).unwrap();
        assert_eq!([step(&mut d), step(&mut d)], [first[2], first[3]]);
        // The next pass starts after close().
        a.close();
        let second = step(&mut a);
        assert_ne!(second, -1.0);
    }

    /// `x` = 0..12 where every value divisible by 3 fails, errors ignored, batches of 2:
    /// 8 good values, 4 batches.
    fn skipping() -> Dataset {
        let x = Array::new(vec![12], Buffer::F32((0..12).map(|v| v as f32).collect())).unwrap();
        Dataset::from_tensor_slices(Element::new().with("x", x))
            .unwrap()
            .map(
                |e| {
                    let v = e.require("x")?.data().try_to_f32().unwrap()[0];
                    if v as i64 % 3 == 0 {
                        Err(kiln_data::DataError::Map(format!("{v} is bad")))
                    } else {
                        Ok(e)
                    }
                },
                kiln_data::Parallelism::Sequential,
            )
            .ignore_errors()
            .batch(2, false)
    }

    #[test]
    fn skips_are_taken_per_call_across_closes_and_a_held_iterator() {
        let ds = skipping();
        let mut c = InputCursor::restore(&ds, InputPosition::default()).unwrap();
        assert_eq!(c.take_skips(), None, "nothing has run");
        // A whole pass (the exhausted iterator closes itself): 4 skips, all listed.
        while c.next_batch().is_some() {}
        let pass = c.take_skips().unwrap();
        assert_eq!(pass.count, 4);
        let indices: Vec<u64> = pass.first.iter().map(|r| r.index).collect();
        assert_eq!(indices, vec![0, 3, 6, 9]);
        assert_eq!(c.take_skips(), None, "taken");
        // An iterator held across two "epochs" (steps_per_epoch): each take has its part.
        c.next_batch(); // values 1, 2 (0 skipped)
        c.next_batch(); // 4, 5 (3 skipped)
        let part1 = c.take_skips().unwrap();
        assert_eq!(part1.count, 2);
        assert_eq!(
            part1.first.iter().map(|r| r.index).collect::<Vec<_>>(),
            vec![0, 3]
        );
        c.next_batch(); // 7, 8 (6 skipped)
        let part2 = c.take_skips().unwrap();
        assert_eq!(part2.count, 1);
        assert_eq!(part2.first[0].index, 6);
        assert_eq!(part2.first[0].error, "map function failed: 6 is bad");
        // Over the listing limit: the count goes on, the list stops at the limit.
        let many = Dataset::from_tensor_slices(
            Element::new().with("x", Array::new(vec![9], Buffer::F32(vec![0.0; 9])).unwrap()),
        )
        .unwrap()
        .map(
            |_| Err(kiln_data::DataError::Map("bad".into())),
            kiln_data::Parallelism::Sequential,
        )
        .ignore_errors()
        .batch(2, false);
        let mut m = InputCursor::restore(&many, InputPosition::default()).unwrap();
        assert!(m.next_batch().is_none());
        let all = m.take_skips().unwrap();
        assert_eq!(
            (all.count, all.first.len()),
            (9, kiln_data::MAX_LISTED_SKIPS)
        );
    }
}
