//! Assembling arrays from the superblocks their members carry (SPDK's examine of a base
//! bdev): members are gathered per array uuid as they appear, and an array is built once
//! every member its newest superblock calls configured is here.
//!
//! A member whose superblock is older than the newest one of its array (a lower sequence
//! number), or that the newest one lists as failed or missing, holds stale data: it is
//! refused, never read from, and waits to be added back (and rebuilt) by the operator. A
//! member the newest one lists as being rebuilt (`spare`) is not waited for, but joins if it
//! is here when the array is built: its rebuild resumes.

use crate::superblock::{MemberState, Superblock};
use pmio::Uuid;

/// A member found with its superblock; `D` is the device (a test may use anything).
#[derive(Clone)]
pub struct Found<D> {
    pub sb: Superblock,
    /// The member bdev's own uuid.
    pub uuid: Uuid,
    pub dev: D,
}

/// What examining one more member decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision<D> {
    /// Not every configured member of the array is here yet.
    Wait,
    /// Every configured member is here: build the array from `sb` with `slots`.
    Assemble {
        sb: Superblock,
        slots: Vec<Option<D>>,
    },
    /// The member is behind the array's newest superblock.
    Stale { member: Uuid, seq: u64, newest: u64 },
}

/// Members found so far, of arrays not assembled yet.
pub struct Gathering<D> {
    found: Vec<Found<D>>,
}

impl<D> Default for Gathering<D> {
    fn default() -> Self {
        Gathering { found: Vec::new() }
    }
}

impl<D: Clone> Gathering<D> {
    /// Takes member `f` in and decides. On `Assemble` the array's members leave the
    /// gathering; a stale member is not kept.
    pub fn offer(&mut self, f: Found<D>) -> Decision<D> {
        let array = f.sb.uuid;
        self.found.retain(|o| o.uuid != f.uuid);
        self.found.push(f);
        let newest = self
            .found
            .iter()
            .filter(|o| o.sb.uuid == array)
            .max_by_key(|o| o.sb.seq_number)
            .map(|o| o.sb.clone())
            .expect("just pushed");
        // Members behind the newest superblock leave: the first to be found stale is reported.
        let mut stale = None;
        self.found.retain(|o| {
            let behind = o.sb.uuid == array
                && (o.sb.seq_number < newest.seq_number
                    || newest.member(&o.uuid).is_none_or(|m| {
                        !matches!(m.state, MemberState::Configured | MemberState::Spare)
                    }));
            if behind && stale.is_none() {
                stale = Some(Decision::Stale {
                    member: o.uuid,
                    seq: o.sb.seq_number,
                    newest: newest.seq_number,
                });
            }
            !behind
        });
        let mut slots: Vec<Option<D>> = (0..newest.num_base_bdevs).map(|_| None).collect();
        let mut missing = 0;
        for m in newest
            .members
            .iter()
            .filter(|m| m.state == MemberState::Configured)
        {
            match self
                .found
                .iter()
                .find(|o| o.sb.uuid == array && o.uuid == m.uuid)
            {
                Some(o) => slots[m.slot as usize] = Some(o.dev.clone()),
                None => missing += 1,
            }
        }
        if missing > 0 {
            return stale.unwrap_or(Decision::Wait);
        }
        // A member being rebuilt that is here joins (its copy resumes); one not here is not
        // waited for: it is added back, and rebuilt, later.
        for m in newest
            .members
            .iter()
            .filter(|m| m.state == MemberState::Spare)
        {
            if let Some(o) = self
                .found
                .iter()
                .find(|o| o.sb.uuid == array && o.uuid == m.uuid)
            {
                slots[m.slot as usize] = Some(o.dev.clone());
            }
        }
        self.found.retain(|o| o.sb.uuid != array);
        Decision::Assemble { sb: newest, slots }
    }

    /// Forgets member `uuid` (its bdev went away before its array was assembled).
    pub fn forget(&mut self, uuid: &Uuid) {
        self.found.retain(|o| &o.uuid != uuid);
    }

    /// Arrays still gathering: the newest superblock seen of each and how many of its
    /// members are here.
    pub fn pending(&self) -> Vec<(Superblock, usize)> {
        let mut out: Vec<(Superblock, usize)> = Vec::new();
        for f in &self.found {
            match out.iter_mut().find(|(sb, _)| sb.uuid == f.sb.uuid) {
                Some((sb, n)) => {
                    *n += 1;
                    if f.sb.seq_number > sb.seq_number {
                        *sb = f.sb.clone();
                    }
                }
                None => out.push((f.sb.clone(), 1)),
            }
        }
        out
    }

    /// Members waiting for their array, with the array's name.
    pub fn waiting(&self) -> impl Iterator<Item = (&str, Uuid)> {
        self.found.iter().map(|f| (f.sb.name.as_str(), f.uuid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::RaidLevel;
    use crate::superblock::{ArrayState, SbMember};

    fn sb(seq: u64, states: &[MemberState]) -> Superblock {
        Superblock {
            uuid: Uuid([9; 16]),
            name: "R".into(),
            raid_size: 100,
            block_size: 512,
            level: RaidLevel::Raid1,
            strip_size: 0,
            state: ArrayState::Online,
            seq_number: seq,
            num_base_bdevs: states.len() as u8,
            members: states
                .iter()
                .enumerate()
                .map(|(i, &state)| SbMember {
                    uuid: Uuid([i as u8 + 1; 16]),
                    data_offset: 2048,
                    data_size: 100,
                    state,
                    slot: i as u8,
                })
                .collect(),
        }
    }

    fn found(sb: Superblock, member: u8) -> Found<u8> {
        Found {
            sb,
            uuid: Uuid([member; 16]),
            dev: member,
        }
    }

    use MemberState::{Configured as C, Failed as F, Spare as S};

    #[test]
    fn an_array_assembles_once_every_configured_member_is_here() {
        let mut g = Gathering::default();
        assert_eq!(g.offer(found(sb(4, &[C, C]), 2)), Decision::Wait);
        match g.offer(found(sb(4, &[C, C]), 1)) {
            Decision::Assemble { sb, slots } => {
                assert_eq!(sb.seq_number, 4);
                assert_eq!(slots, [Some(1), Some(2)]);
            }
            d => panic!("{d:?}"),
        }
        assert_eq!(g.waiting().count(), 0);
    }

    #[test]
    fn a_member_behind_the_newest_superblock_is_refused_in_either_order() {
        // Member 2 failed at seq 5: member 1 carries seq 6 marking it failed, member 2
        // still its seq 5 where both were configured.
        for stale_first in [true, false] {
            let mut g = Gathering::default();
            let old = found(sb(5, &[C, C]), 2);
            let new = found(sb(6, &[C, F]), 1);
            let (a, b) = if stale_first { (old, new) } else { (new, old) };
            let first = g.offer(a);
            let second = g.offer(b);
            let (assembled, stale) = if stale_first {
                (second, first)
            } else {
                (first, second)
            };
            match assembled {
                Decision::Assemble { slots, .. } => assert_eq!(slots, [Some(1), None]),
                d => panic!("{d:?}"),
            }
            if !stale_first {
                // Arriving after assembly it is a member of no gathering array; the
                // caller refuses it against the running array.
                assert_eq!(stale, Decision::Wait);
            }
            assert!(g.waiting().all(|(_, u)| u != Uuid([1; 16])));
        }
        // Same sequence number, but the newest table says failed: refused too.
        let mut g = Gathering::default();
        assert_eq!(g.offer(found(sb(6, &[C, C, F]), 1)), Decision::Wait);
        assert_eq!(
            g.offer(found(sb(6, &[C, C, F]), 3)),
            Decision::Stale {
                member: Uuid([3; 16]),
                seq: 6,
                newest: 6
            }
        );
    }

    #[test]
    fn a_member_being_rebuilt_joins_if_here_and_is_not_waited_for() {
        // Here before the last configured member: in its slot.
        let mut g = Gathering::default();
        assert_eq!(g.offer(found(sb(7, &[C, S]), 2)), Decision::Wait);
        match g.offer(found(sb(7, &[C, S]), 1)) {
            Decision::Assemble { slots, .. } => assert_eq!(slots, [Some(1), Some(2)]),
            d => panic!("{d:?}"),
        }
        // Not here: the array does not wait for it.
        let mut g = Gathering::default();
        match g.offer(found(sb(7, &[C, S]), 1)) {
            Decision::Assemble { slots, .. } => assert_eq!(slots, [Some(1), None]),
            d => panic!("{d:?}"),
        }
        // Behind the newest superblock it is stale like any other.
        let mut g = Gathering::default();
        assert_eq!(g.offer(found(sb(6, &[C, S, C]), 2)), Decision::Wait);
        assert!(matches!(
            g.offer(found(sb(7, &[C, S, C]), 1)),
            Decision::Stale { seq: 6, .. }
        ));
    }
}
