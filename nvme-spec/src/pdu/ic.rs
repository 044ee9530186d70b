//! Connection set-up: the ICReq a host opens with, the ICResp a controller answers with, the
//! checks a host makes on that answer, and the [`Link`] both ends use afterwards.

use super::*;

/// The least MAXH2CDATA a host takes: the spec says it should be no less than 4096, and
/// Linux's host refuses anything smaller.
pub const MIN_MAXH2CDATA: u32 = 4096;

impl IcReq {
    /// What a host sends: PFV 0; HPDA 0, so data follows the header with no padding (what
    /// Linux's and SPDK's hosts ask for); MAXR2T 0, one R2T per command at a time; and the
    /// digests it wants.
    pub const fn new(digests: Digests) -> IcReq {
        IcReq {
            pfv: 0,
            hpda: Pda::ZERO,
            digests,
            maxr2t: 0,
        }
    }
}

impl IcResp {
    /// A controller's answer to `req`: the digests echoed exactly (Linux's host fails the
    /// connect on any difference), the controller's `cpda` and `maxh2cdata`.
    pub const fn answer(req: &IcReq, cpda: Pda, maxh2cdata: u32) -> IcResp {
        IcResp {
            pfv: 0,
            cpda,
            digests: req.digests,
            maxh2cdata,
        }
    }

    /// A host's check of the answer to the ICReq it `sent`, beyond what [`parse`] checks
    /// (type, PLEN 128, PFV 0, CPDA at most 31, MAXH2CDATA a non-zero multiple of 4), as
    /// Linux's host makes it: the digests echo the request exactly and MAXH2CDATA is at least
    /// [`MIN_MAXH2CDATA`]. The error names the field, as [`parse`]'s do; its
    /// [`PduError::action`] is the H2CTermReq to send.
    ///
    /// Linux's host also refuses a CPDA other than 0, having no padding on its send path;
    /// [`encode`] pads to any CPDA, so this host takes what the controller asks for.
    pub fn check(&self, sent: &IcReq) -> Result<(), PduError> {
        let invalid = |offset: usize, value: u32| PduError::InvalidField {
            pdu_type: PduType::IcResp,
            offset: offset as u8,
            value,
        };
        if self.digests.dgst() != sent.digests.dgst() {
            return Err(invalid(field::IC_DGST, self.digests.dgst() as u32));
        }
        if self.maxh2cdata < MIN_MAXH2CDATA {
            return Err(invalid(field::IC_MAX, self.maxh2cdata));
        }
        Ok(())
    }
}

impl Link {
    /// The link once `resp` answered `req`, at either end: the digests the ICResp enabled,
    /// the host's HPDA for data to the host, the controller's CPDA for data to the controller.
    pub const fn after_ic(self, req: &IcReq, resp: &IcResp) -> Link {
        self.negotiated(resp.digests, req.hpda, resp.cpda)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: Digests = Digests {
        header: true,
        data: true,
    };

    #[test]
    fn host_accepts_an_answer_that_echoes_its_request() {
        let req = IcReq::new(BOTH);
        assert_eq!(
            (req.pfv, req.hpda, req.maxr2t, req.digests),
            (0, Pda::ZERO, 0, BOTH)
        );
        let cpda = Pda::new(7).unwrap();
        let resp = IcResp::answer(&req, cpda, 128 * 1024);
        assert_eq!(resp.check(&req), Ok(()));
        // Both ends derive the same link, each from its own side.
        let host = Link::new(Side::Host, 0).after_ic(&req, &resp);
        let ctrl = Link::new(Side::Controller, 0).after_ic(&req, &resp);
        for link in [host, ctrl] {
            assert_eq!(
                (link.digests(), link.hpda(), link.cpda()),
                (BOTH, Pda::ZERO, cpda)
            );
        }
    }

    #[test]
    fn fault_icresp_digests_not_echoed() {
        for (asked, got) in [(0, 1), (1, 0), (3, 2), (0, 3), (2, 0)] {
            let req = IcReq::new(Digests::from_dgst(asked));
            let resp = IcResp {
                digests: Digests::from_dgst(got),
                ..IcResp::answer(&req, Pda::ZERO, 4096)
            };
            let e = resp.check(&req).unwrap_err();
            assert_eq!(
                e,
                PduError::InvalidField {
                    pdu_type: PduType::IcResp,
                    offset: field::IC_DGST as u8,
                    value: u32::from(got)
                }
            );
            assert_eq!(
                e.action(),
                ErrorAction::Terminate(FatalError {
                    fes: Fes::InvalidHeaderField,
                    fei: field::IC_DGST as u32
                })
            );
        }
    }

    #[test]
    fn fault_icresp_maxh2cdata_below_4096() {
        let req = IcReq::new(Digests::NONE);
        for max in [4, 1024, 4092] {
            let resp = IcResp::answer(&req, Pda::ZERO, max);
            assert!(
                matches!(resp.check(&req), Err(PduError::InvalidField { offset, value, .. })
                    if usize::from(offset) == field::IC_MAX && value == max),
                "{max}"
            );
        }
        assert_eq!(
            IcResp::answer(&req, Pda::ZERO, MIN_MAXH2CDATA).check(&req),
            Ok(())
        );
    }

    /// What Linux's target sends (MAXH2CDATA 0x400000, CPDA 0) parses at a host and passes.
    #[test]
    fn a_linux_targets_icresp_off_the_wire() {
        let mut wire = [0u8; 128];
        wire[..8].copy_from_slice(&[0x01, 0, 128, 0, 128, 0, 0, 0]);
        wire[field::IC_DGST] = 0x03;
        wire[field::IC_MAX..field::IC_MAX + 4].copy_from_slice(&0x40_0000u32.to_le_bytes());
        let link = Link::new(Side::Host, max_plen_for_data(4096));
        let (pdu, used) = parse(&wire, &link).unwrap().unwrap();
        assert_eq!(used, 128);
        let Header::IcResp(resp) = pdu.header else {
            panic!("{:?}", pdu.header);
        };
        assert_eq!(resp.check(&IcReq::new(BOTH)), Ok(()));
        assert!(resp.check(&IcReq::new(Digests::NONE)).is_err());
    }
}
