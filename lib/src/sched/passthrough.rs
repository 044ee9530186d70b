//! The `none` scheduler as a queue: requests leave in the order they came, nothing is merged
//! or reordered, nothing is shared. It exists so a reactor drives `none` and `mq-deadline`
//! through the same calls (and so the two can be benchmarked side by side).

use std::collections::VecDeque;

use crate::request::IoStatus;

use super::{Dispatched, SchedError, SchedRq};

/// Pass-through queue of one reactor. Preallocated; never grows past its capacity.
#[derive(Debug)]
pub struct PassThrough {
    fifo: VecDeque<Dispatched>,
    cap: usize,
}

impl PassThrough {
    /// A queue holding at most `cap` requests between insert and dispatch (storage grows on
    /// demand up to `cap`, then stays).
    pub fn new(cap: usize) -> PassThrough {
        PassThrough {
            fifo: VecDeque::new(),
            cap,
        }
    }

    /// Requests inserted and not dispatched.
    pub fn pending(&self) -> usize {
        self.fifo.len()
    }

    fn full(&self, id: u32) -> Result<(), SchedError> {
        if self.fifo.len() >= self.cap {
            Err(SchedError::Busy { id })
        } else {
            Ok(())
        }
    }

    /// Queues a burst in order.
    pub fn insert_batch(&mut self, rqs: &[SchedRq]) -> Result<super::InsertSummary, SchedError> {
        let mut sum = super::InsertSummary::default();
        for rq in rqs {
            self.full(rq.id)?;
            let d = Dispatched {
                id: rq.id,
                owner: rq.owner,
                op: rq.op,
                prio: rq.prio,
                flags: rq.flags,
                sector: rq.sector,
                nblocks: rq.nblocks,
                addr: rq.addr,
                nsegs: 1,
                nr_members: 1,
            };
            if rq.flags.contains(crate::request::ReqFlags::HEAD) {
                self.fifo.push_front(d);
                sum.head += 1;
            } else {
                self.fifo.push_back(d);
                sum.queued += 1;
            }
        }
        Ok(sum)
    }

    /// Takes up to `max` requests in order.
    #[inline]
    pub fn dispatch_batch(&mut self, max: usize, out: &mut Vec<Dispatched>) -> usize {
        let n = max.min(self.fifo.len());
        out.extend(self.fifo.drain(..n));
        n
    }

    /// Puts dispatched requests back at the front, in the order given.
    pub fn requeue_batch(&mut self, rqs: &[Dispatched]) -> Result<(), SchedError> {
        for d in rqs.iter().rev() {
            self.full(d.id)?;
            self.fifo.push_front(*d);
        }
        Ok(())
    }

    /// Reports each completed request once.
    #[inline]
    pub fn complete_batch<I, F>(&mut self, done: I, mut f: F) -> usize
    where
        I: IntoIterator<Item = (u32, IoStatus)>,
        F: FnMut(u32, IoStatus),
    {
        let mut n = 0;
        for (id, st) in done {
            f(id, st);
            n += 1;
        }
        n
    }
}
