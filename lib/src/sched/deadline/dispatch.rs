//! Linux's dispatch algorithm (`dd_dispatch_request`): which queued request goes to the
//! driver next, and the hand-out that marks it in flight.
//!
//! The dispatch list first; then, only when two or more classes have requests queued, the
//! aging pass (a BE or IDLE request inserted more than `prio_aging_expire` ago goes first);
//! then RT → BE → IDLE, where a lower class waits while a higher one has requests queued or
//! in flight. Within a class a sequential batch continues up to `fifo_batch` requests;
//! otherwise a direction is chosen (reads, unless writes have been passed over
//! `writes_starved` times) and the FIFO head is taken if its deadline has passed, else the
//! next request by sector.
//!
//! Deviation from Linux, on purpose: choosing a request ([`Deadline::choose`]) is side-effect
//! free until a request is actually taken ([`Deadline::take`]), so an aging pass that finds
//! nothing old enough does not disturb the batch state (`last_dir`, `batching`, `starved`) of
//! the normal pass.
//!
//! A request the algorithm picks for another owner than the caller waits in that owner's
//! ready list. [`Deadline::dispatch_run`] takes a sequential run in one step where the
//! algorithm would take it one request at a time (pinned to it by a property test).

use crate::request::PrioClass;
use crate::sched::{Dir, Dispatched, SchedError};

use super::slab::State;
use super::{Deadline, NIL, PerPrio};

/// The request chosen by one step of the dispatch algorithm, before it is taken.
#[derive(Clone, Copy, Debug)]
struct Choice {
    id: u32,
    dir: Dir,
    /// Position of `id` in its sort set, when the choice found it there.
    pos: Option<usize>,
    /// Whether this starts a new batch (direction decided afresh).
    new_batch: bool,
    /// Whether writes were chosen after reads had been preferred `writes_starved` times.
    starved_writes: bool,
    /// Whether reads were preferred over waiting writes.
    passed_writes: bool,
}

impl Deadline {
    /// Hands out up to `max` requests for `owner` at time `now_ns` into `out`; returns how
    /// many were pushed. Requests already taken for `owner` by other owners come first; a
    /// request the algorithm picks for another owner goes to that owner's ready list (it
    /// counts towards `max`, so one call does bounded work). `out` should have capacity for
    /// `max` more entries (then nothing is allocated).
    pub fn dispatch_batch(
        &mut self,
        owner: u16,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Dispatched>,
    ) -> usize {
        let o = usize::from(owner);
        if o >= self.ready.len() {
            log::error!("mq-deadline: dispatch for unknown owner {owner}");
            return 0;
        }
        let mut n = 0;
        while n < max
            && let Some(id) = self.ready[o].pop_front()
        {
            self.ready_total -= 1;
            out.push(self.hand_out(id));
            n += 1;
        }
        let mut budget = max - n;
        while budget > 0 {
            if let Some(k) = self.dispatch_run(owner, budget, out) {
                n += k.0;
                budget -= k.1;
                continue;
            }
            let Some(id) = self.dispatch_one(now_ns) else {
                break;
            };
            budget -= 1;
            n += self.deliver(owner, id, out);
        }
        n
    }

    /// Hands `id` to `owner` (returns 1) or parks it in its owner's ready list (returns 0).
    #[inline]
    fn deliver(&mut self, owner: u16, id: u32, out: &mut Vec<Dispatched>) -> usize {
        let to = self.slots[id as usize].owner;
        if to == owner {
            out.push(self.hand_out(id));
            1
        } else {
            self.slots[id as usize].state = State::Ready;
            self.ready[usize::from(to)].push_back(id);
            self.ready_total += 1;
            0
        }
    }

    /// The common case in one step: when the dispatch list is empty and exactly one class has
    /// requests queued or in flight (so there is no aging pass and no class above to wait
    /// for) and the current sequential batch can continue, the next requests `dispatch_one`
    /// would return one by one are the consecutive entries of the sort set from the batch
    /// position on. Takes up to `budget` of them with one shift of the set. Returns
    /// (handed to `owner`, taken), or `None` when the fast path does not apply.
    fn dispatch_run(
        &mut self,
        owner: u16,
        budget: usize,
        out: &mut Vec<Dispatched>,
    ) -> Option<(usize, usize)> {
        if !self.fast_runs || !self.dispatch.is_empty() || self.batching >= self.opts.fifo_batch {
            return None;
        }
        let mut only = None;
        for prio in PrioClass::ALL {
            if self.queued(prio) > 0 {
                if only.is_some() {
                    return None;
                }
                only = Some(prio);
            }
        }
        let prio = only?;
        let (p, d) = (prio as usize, self.last_dir as usize);
        let (i, _) = self.prios[p].sort[d].next_at(self.prios[p].latest_pos[d])?;
        let avail = self.prios[p].sort[d].len() - i;
        let len = budget
            .min(avail)
            .min((self.opts.fifo_batch - self.batching) as usize);
        let mut handed = 0;
        for k in 0..len {
            let id = self.prios[p].sort[d].id_at(i + k);
            self.fifo_unlink(p, d, id);
            self.prios[p].latest_pos[d] = self.slots[id as usize].sector;
            self.count_dispatched(id);
            handed += self.deliver(owner, id, out);
        }
        self.prios[p].sort[d].remove_run(i, len);
        self.batching += len as u32;
        self.pending -= len as u32;
        Some((handed, len))
    }

    /// Marks a carrier and its members in flight and describes it.
    fn hand_out(&mut self, id: u32) -> Dispatched {
        let s = &mut self.slots[id as usize];
        s.state = State::Out;
        let s = *s;
        self.side.set_head(id, s.chain_head);
        let mut m = s.chain_head;
        while m != NIL {
            if m != id {
                self.slots[m as usize].state = State::Out;
                self.side.mark_member(m, s.prio);
            }
            m = self.side.next(m);
        }
        self.side.mark_carrier(id, s.prio);
        s.dispatched(id)
    }

    /// One step of `dd_dispatch_request`: takes the next request out of the scheduler.
    fn dispatch_one(&mut self, now_ns: u64) -> Option<u32> {
        if let Some(id) = self.dispatch.pop_front() {
            self.pending -= 1;
            self.count_dispatched(id);
            return Some(id);
        }
        if self.pending == 0 {
            return None;
        }
        if let Some(id) = self.dispatch_aged(now_ns) {
            return Some(id);
        }
        for prio in PrioClass::ALL {
            if let Some(c) = self.choose(prio, now_ns, None) {
                return Some(self.take(prio, c));
            }
            if self.queued(prio) > 0 {
                // Lower classes wait while this one has requests queued or in flight.
                break;
            }
        }
        None
    }

    /// The aging pass (`dd_dispatch_prio_aged_requests`): only when two or more classes have
    /// requests queued, a BE then IDLE request inserted at least `prio_aging_expire` ago.
    fn dispatch_aged(&mut self, now_ns: u64) -> Option<u32> {
        let busy = PrioClass::ALL
            .iter()
            .filter(|&&p| self.queued(p) > 0)
            .count();
        if busy < 2 || now_ns < self.aging_ns {
            return None;
        }
        let latest_start = now_ns - self.aging_ns;
        for prio in [PrioClass::Be, PrioClass::Idle] {
            if let Some(c) = self.choose(prio, now_ns, Some(latest_start)) {
                return Some(self.take(prio, c));
            }
        }
        None
    }

    /// `__dd_dispatch_request` without side effects: the request one class would dispatch.
    /// With `latest_start`, a request inserted after it is refused (`started_after`).
    fn choose(&self, prio: PrioClass, now_ns: u64, latest_start: Option<u64>) -> Option<Choice> {
        let pp = &self.prios[prio as usize];
        let batch = self.next_by_sector(pp, self.last_dir);
        let choice = match batch {
            Some((pos, id)) if self.batching < self.opts.fifo_batch => Choice {
                id,
                dir: self.last_dir,
                pos: Some(pos),
                new_batch: false,
                starved_writes: false,
                passed_writes: false,
            },
            _ => {
                let reads = pp.fifo_head[Dir::Read as usize] != NIL;
                let writes = pp.fifo_head[Dir::Write as usize] != NIL;
                let (dir, starved_writes, passed_writes) = if reads {
                    if writes && self.starved >= self.opts.writes_starved {
                        (Dir::Write, true, false)
                    } else {
                        (Dir::Read, false, writes)
                    }
                } else if writes {
                    (Dir::Write, true, false)
                } else {
                    return None;
                };
                let head = pp.fifo_head[dir as usize];
                let expired = now_ns >= self.slots[head as usize].deadline_ns;
                let next = if dir == self.last_dir {
                    batch
                } else {
                    self.next_by_sector(pp, dir)
                };
                let (id, pos) = match next {
                    Some((pos, next)) if !expired => (next, Some(pos)),
                    _ => (head, None),
                };
                Choice {
                    id,
                    dir,
                    pos,
                    new_batch: true,
                    starved_writes,
                    passed_writes,
                }
            }
        };
        if let Some(ls) = latest_start
            && self.slots[choice.id as usize].insert_ns > ls
        {
            return None;
        }
        Some(choice)
    }

    /// First queued request at or after the last dispatched position in direction `dir`
    /// (`deadline_from_pos`).
    #[inline]
    fn next_by_sector(&self, pp: &PerPrio, dir: Dir) -> Option<(usize, u32)> {
        pp.sort[dir as usize].next_at(pp.latest_pos[dir as usize])
    }

    /// Commits a choice: batch state, tree/FIFO removal, counters (`deadline_move_request`,
    /// `dd_start_request`).
    fn take(&mut self, prio: PrioClass, c: Choice) -> u32 {
        if c.new_batch {
            if c.starved_writes {
                self.starved = 0;
            } else if c.passed_writes {
                self.starved += 1;
            }
            self.last_dir = c.dir;
            self.batching = 0;
        }
        self.batching += 1;
        let (p, d) = (prio as usize, c.dir as usize);
        let sector = self.slots[c.id as usize].sector;
        match c.pos {
            Some(i) => self.prios[p].sort[d].remove_at(i, c.id),
            None => {
                self.prios[p].sort[d].remove(c.id, sector);
            }
        }
        self.fifo_unlink(p, d, c.id);
        self.prios[p].latest_pos[d] = sector;
        self.pending -= 1;
        self.count_dispatched(c.id);
        c.id
    }

    fn count_dispatched(&mut self, id: u32) {
        let s = &mut self.slots[id as usize];
        if !s.started {
            s.started = true;
            self.prios[s.prio as usize].dispatched += 1;
        }
    }

    /// Gives a handed-out request back (the driver could not take it): it goes to the head of
    /// the dispatch list and is not counted again.
    pub fn requeue(&mut self, id: u32) -> Result<(), SchedError> {
        let Some(&s) = self.slots.get(id as usize) else {
            return Err(SchedError::BadId { id });
        };
        // Only a carrier that is handed out and not completed may come back.
        if s.state != State::Out || s.chain_head == NIL || !self.side.take_back(id) {
            return Err(SchedError::NotInFlight { id });
        }
        let mut m = s.chain_head;
        while m != NIL {
            if m != id {
                self.side.unmark_member(m);
                self.slots[m as usize].state = State::Member;
            }
            m = self.side.next(m);
        }
        self.slots[id as usize].state = State::Head;
        self.dispatch.push_front(id);
        self.pending += 1;
        Ok(())
    }
}
