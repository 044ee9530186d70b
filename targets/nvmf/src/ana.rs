//! Asymmetric Namespace Access (NVMe Base 2.0 §8.1): the state each listener reports for each
//! ANA group of a subsystem, and the ANA log page (LID 0Ch) a controller returns through the
//! listener its host connected to. Pure: no I/O; [`crate::subsystem::Subsystem`] holds the
//! states, [`crate::ctrlr`] reads them for its host.
//!
//! As SPDK's target: every listener starts with every group Optimized (or the state given to
//! `nvmf_subsystem_add_listener`); the groups are 1..=max_namespaces; a namespace's group is
//! its NSID unless given. Change and Persistent Loss are never reported.

use crate::identify::IdWriter;
use crate::spec::Status;
use crate::subsystem::{ListenAddr, Namespace};

/// Length of the ANA log page header: change count (8), number of descriptors (2), reserved.
pub const ANA_LOG_HEADER_LEN: usize = 16;
/// Length of an ANA group descriptor before its NSIDs: ANAGRPID (4), NNSID (4), change
/// count (8), state (1), reserved.
pub const ANA_DESC_LEN: usize = 32;

/// ANA Transition Time (ANATT), seconds: SPDK's 10.
pub const ANATT_SECS: u8 = 10;

/// The state of an ANA group as one listener reports it (the log page's codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnaState {
    Optimized = 1,
    NonOptimized = 2,
    Inaccessible = 3,
}

impl AnaState {
    /// The state's code in the ANA log page.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// SPDK's name (RPC parameters and replies).
    pub fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non_optimized",
            AnaState::Inaccessible => "inaccessible",
        }
    }

    /// The state named `s` (SPDK's names).
    pub fn parse(s: &str) -> Option<AnaState> {
        [
            AnaState::Optimized,
            AnaState::NonOptimized,
            AnaState::Inaccessible,
        ]
        .into_iter()
        .find(|a| a.name() == s)
    }

    /// The status an I/O (or a namespace-specific admin command) gets through a path in this
    /// state: `None` where it is served.
    pub fn path_status(self) -> Option<Status> {
        match self {
            AnaState::Optimized | AnaState::NonOptimized => None,
            AnaState::Inaccessible => Some(Status::ANA_INACCESSIBLE),
        }
    }
}

/// The ANA states of one listener of a subsystem, one per group (index = ANAGRPID - 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerAna {
    pub addr: ListenAddr,
    pub states: Vec<AnaState>,
    /// Bumped at every change of `states`: controllers connected through this listener
    /// compare it to tell their hosts (ANA change notice).
    pub change_count: u64,
}

impl ListenerAna {
    /// `groups` groups all in `state`.
    pub fn new(addr: ListenAddr, groups: u32, state: AnaState) -> ListenerAna {
        ListenerAna {
            addr,
            states: vec![state; groups as usize],
            change_count: 0,
        }
    }

    /// The state of group `anagrpid` (Optimized for a group outside the range: SPDK reports
    /// optimized where it has nothing to say).
    pub fn state(&self, anagrpid: u32) -> AnaState {
        anagrpid
            .checked_sub(1)
            .and_then(|i| self.states.get(i as usize))
            .copied()
            .unwrap_or(AnaState::Optimized)
    }

    /// Sets group `anagrpid` (0: every group) to `state`; whether anything changed.
    pub fn set(&mut self, state: AnaState, anagrpid: u32) -> bool {
        let mut changed = false;
        for (i, s) in self.states.iter_mut().enumerate() {
            if (anagrpid == 0 || i + 1 == anagrpid as usize) && *s != state {
                *s = state;
                changed = true;
            }
        }
        if changed {
            self.change_count += 1;
        }
        changed
    }
}

/// How logs and the configuration check name group `anagrpid` of an ANA state change (0:
/// every group).
pub fn group_name(anagrpid: u32) -> String {
    match anagrpid {
        0 => "(all)".to_string(),
        g => g.to_string(),
    }
}

/// The state of group `anagrpid` through listener `addr` of a subsystem that reports ANA and
/// whose listeners are `listeners`: Inaccessible through an address that is no listener (any
/// more), as SPDK's `nvmf_ctrlr_get_ana_state` for an inactive listener.
pub fn state_through(listeners: &[ListenerAna], addr: &ListenAddr, anagrpid: u32) -> AnaState {
    listeners
        .iter()
        .find(|l| &l.addr == addr)
        .map_or(AnaState::Inaccessible, |l| l.state(anagrpid))
}

/// The ANA log page as a controller connected through a listener in `states` sees it: one
/// descriptor per group that has namespaces, in group order, each with its NSIDs ascending
/// unless `rgo` (Return Groups Only: NNSID 0, no NSIDs). Change counts are 0 (SPDK keeps
/// none); the host re-reads the page on every ANA change notice anyway.
pub fn ana_log_page(
    namespaces: &[Namespace],
    state: impl Fn(u32) -> AnaState,
    rgo: bool,
) -> Vec<u8> {
    let mut groups: Vec<u32> = namespaces.iter().map(|n| n.anagrpid).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut page = IdWriter::new(ANA_LOG_HEADER_LEN);
    page.u16(8, groups.len() as u16);
    let mut page = page.finish();
    for g in groups {
        // `namespaces` is ordered by NSID.
        let nsids: Vec<u32> = if rgo {
            Vec::new()
        } else {
            namespaces
                .iter()
                .filter(|n| n.anagrpid == g)
                .map(|n| n.nsid)
                .collect()
        };
        let mut d = IdWriter::new(ANA_DESC_LEN + 4 * nsids.len());
        d.u32(0, g)
            .u32(4, nsids.len() as u32)
            .u8(16, state(g).code());
        for (i, id) in nsids.iter().enumerate() {
            d.u32(ANA_DESC_LEN + 4 * i, *id);
        }
        page.extend_from_slice(&d.finish());
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identify::testutil::bdev;
    use pmio::OpSet;

    fn ns(nsid: u32, anagrpid: u32) -> Namespace {
        let b = bdev(&format!("b{nsid}"), 512, 64, OpSet::ALL);
        Namespace {
            nsid,
            uuid: b.info().uuid,
            nguid: [nsid as u8; 16],
            eui64: None,
            anagrpid,
            bdev: b,
        }
    }

    #[test]
    fn states_by_name_and_code() {
        for s in [
            AnaState::Optimized,
            AnaState::NonOptimized,
            AnaState::Inaccessible,
        ] {
            assert_eq!(AnaState::parse(s.name()), Some(s));
        }
        assert_eq!(AnaState::parse("change"), None);
        assert_eq!(AnaState::Inaccessible.code(), 3);
        assert_eq!(
            AnaState::Inaccessible.path_status(),
            Some(Status::ANA_INACCESSIBLE)
        );
        assert_eq!(AnaState::NonOptimized.path_status(), None);
    }

    #[test]
    fn set_one_group_or_all_counts_changes() {
        let a = ListenAddr::new("127.0.0.1", "4420", None).unwrap();
        let mut l = ListenerAna::new(a, 3, AnaState::Optimized);
        assert!(l.set(AnaState::Inaccessible, 2));
        assert_eq!(l.state(1), AnaState::Optimized);
        assert_eq!(l.state(2), AnaState::Inaccessible);
        assert!(!l.set(AnaState::Inaccessible, 2), "no change, no count");
        assert_eq!(l.change_count, 1);
        assert!(l.set(AnaState::NonOptimized, 0));
        assert!((1..=3).all(|g| l.state(g) == AnaState::NonOptimized));
        assert_eq!(l.change_count, 2);
    }

    #[test]
    fn log_page_groups_with_their_namespaces() {
        // NSIDs 1 and 3 in group 1, NSID 2 in group 2; group 2 inaccessible.
        let list = [ns(1, 1), ns(2, 2), ns(3, 1)];
        let st = |g| {
            if g == 2 {
                AnaState::Inaccessible
            } else {
                AnaState::Optimized
            }
        };
        let p = ana_log_page(&list, st, false);
        assert_eq!(p.len(), 16 + (32 + 8) + (32 + 4));
        assert_eq!(u16::from_le_bytes([p[8], p[9]]), 2);
        let d1 = &p[16..];
        assert_eq!(&d1[0..4], &1u32.to_le_bytes());
        assert_eq!(&d1[4..8], &2u32.to_le_bytes());
        assert_eq!(d1[16], 1);
        assert_eq!(&d1[32..36], &1u32.to_le_bytes());
        assert_eq!(&d1[36..40], &3u32.to_le_bytes());
        let d2 = &p[16 + 40..];
        assert_eq!(&d2[0..4], &2u32.to_le_bytes());
        assert_eq!(&d2[4..8], &1u32.to_le_bytes());
        assert_eq!(d2[16], 3);
        assert_eq!(&d2[32..36], &2u32.to_le_bytes());

        let rgo = ana_log_page(&list, st, true);
        assert_eq!(rgo.len(), 16 + 2 * 32);
        assert_eq!(&rgo[16 + 4..16 + 8], &0u32.to_le_bytes());
        assert_eq!(rgo[16 + 32 + 16], 3);
    }
}
