//! Data PDUs and R2Ts checked against the command they name: whether the bytes continue its
//! transfer where it stands and stay inside it. The receiver keeps the state (how many bytes
//! arrived or were asked for); these rules are the same for every command, so they live here.
//!
//! A violation is a fatal error of the connection: the [`FatalError`] is the TermReq to send
//! (its data: [`offending_header`] of the PDU), then the connection closes.

use super::*;

/// Data Transfer Out of Range; its FEI is reserved.
const OUT_OF_RANGE: FatalError = FatalError {
    fes: Fes::DataOutOfRange,
    fei: 0,
};

/// Whether `n` bytes at `offset` fall inside a transfer of `total` bytes.
const fn inside(offset: u32, n: u32, total: u32) -> bool {
    offset as u64 + n as u64 <= total as u64
}

impl H2CData {
    /// A controller's check of this PDU, carrying `n` bytes, against the write it names, of
    /// which `received` of `total` bytes arrived in order: the data continues where they
    /// stopped, stays inside, and LAST comes with the final byte, no earlier and no later.
    /// Anything else is Data Transfer Out of Range.
    pub const fn check(&self, n: u32, received: u32, total: u32) -> Result<(), FatalError> {
        let ends = inside(received, n, total) && received + n == total;
        if self.datao != received || !inside(received, n, total) || self.last != ends {
            return Err(OUT_OF_RANGE);
        }
        Ok(())
    }
}

impl C2HData {
    /// A host's check of this PDU, carrying `n` bytes, against the read it names, of which
    /// `received` of `total` bytes arrived in order:
    /// - DATAO continues where the data stopped, else Invalid Header Field naming DATAO (as
    ///   SPDK's host);
    /// - the data stays inside the read's buffer, else Data Transfer Out of Range;
    /// - SUCCESS, which stands for the CapsuleResp, comes with the final byte: a read that
    ///   "succeeded" short of its data would hand stale bytes to its caller. Else Invalid
    ///   Header Field naming FLAGS.
    ///
    /// LAST without SUCCESS may come early: a CapsuleResp follows and has the last word.
    pub const fn check(&self, n: u32, received: u32, total: u32) -> Result<(), FatalError> {
        if self.datao != received {
            return Err(FatalError::invalid_field(field::XFER_OFFSET));
        }
        if !inside(received, n, total) {
            return Err(OUT_OF_RANGE);
        }
        if self.success && received + n != total {
            return Err(FatalError::invalid_field(field::CH_FLAGS));
        }
        Ok(())
    }
}

impl R2T {
    /// A host's check of this R2T against the write it names, of which `sent` of `total`
    /// bytes went out (in-capsule or for earlier R2Ts): R2TL is not 0 (Linux's host refuses
    /// it), R2TO is where the data stopped (as SPDK's host), both Invalid Header Field naming
    /// the field; the range stays inside the write, else Data Transfer Out of Range.
    pub const fn check(&self, sent: u32, total: u32) -> Result<(), FatalError> {
        if self.r2tl == 0 {
            return Err(FatalError::invalid_field(field::XFER_LEN));
        }
        if self.r2to != sent {
            return Err(FatalError::invalid_field(field::XFER_OFFSET));
        }
        if !inside(self.r2to, self.r2tl, total) {
            return Err(OUT_OF_RANGE);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn c2h(datao: u32, last: bool, success: bool) -> C2HData {
        C2HData {
            cccid: 1,
            datao,
            last,
            success,
        }
    }

    fn h2c(datao: u32, last: bool) -> H2CData {
        H2CData {
            cccid: 1,
            ttag: 2,
            datao,
            last,
        }
    }

    fn r2t(r2to: u32, r2tl: u32) -> R2T {
        R2T {
            cccid: 1,
            ttag: 2,
            r2to,
            r2tl,
        }
    }

    #[test]
    fn a_read_arrives_in_order_and_ends_with_success() {
        // 8 KiB in two PDUs, SUCCESS on the last.
        assert_eq!(c2h(0, false, false).check(4096, 0, 8192), Ok(()));
        assert_eq!(c2h(4096, true, true).check(4096, 4096, 8192), Ok(()));
        // LAST early, a CapsuleResp to follow.
        assert_eq!(c2h(0, true, false).check(512, 0, 8192), Ok(()));
    }

    #[test]
    fn fault_c2h_data_out_of_order_past_the_buffer_or_successful_short() {
        assert_eq!(
            c2h(512, false, false).check(512, 0, 8192),
            Err(FatalError::invalid_field(field::XFER_OFFSET))
        );
        assert_eq!(
            c2h(4096, false, false).check(4097, 4096, 8192),
            Err(OUT_OF_RANGE)
        );
        assert_eq!(
            c2h(0, false, false).check(1, 0, 0),
            Err(OUT_OF_RANGE),
            "data for a command that reads none"
        );
        assert_eq!(
            c2h(0, true, true).check(4096, 0, 8192),
            Err(FatalError::invalid_field(field::CH_FLAGS))
        );
        assert_eq!(
            c2h(u32::MAX, true, true).check(u32::MAX, u32::MAX, u32::MAX),
            Err(OUT_OF_RANGE),
            "no overflow"
        );
    }

    #[test]
    fn fault_h2c_data_out_of_order_past_the_write_or_last_misplaced() {
        assert_eq!(h2c(0, false).check(4096, 0, 8192), Ok(()));
        assert_eq!(h2c(4096, true).check(4096, 4096, 8192), Ok(()));
        for (d, n, received) in [
            (h2c(4096, false), 4096, 0),
            (h2c(4096, true), 4097, 4096),
            (h2c(0, true), 4096, 0),
            (h2c(4096, false), 4096, 4096),
        ] {
            assert_eq!(d.check(n, received, 8192), Err(OUT_OF_RANGE), "{d:?} {n}");
        }
    }

    #[test]
    fn fault_r2t_empty_misplaced_or_past_the_write() {
        assert_eq!(r2t(0, 8192).check(0, 8192), Ok(()));
        assert_eq!(r2t(4096, 4096).check(4096, 8192), Ok(()));
        assert_eq!(
            r2t(0, 0).check(0, 8192),
            Err(FatalError::invalid_field(field::XFER_LEN))
        );
        assert_eq!(
            r2t(4096, 4096).check(0, 8192),
            Err(FatalError::invalid_field(field::XFER_OFFSET))
        );
        assert_eq!(r2t(4096, 4097).check(4096, 8192), Err(OUT_OF_RANGE));
        assert_eq!(
            r2t(u32::MAX, u32::MAX).check(u32::MAX, u32::MAX),
            Err(OUT_OF_RANGE)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every accepted PDU lies inside its command's transfer and continues it; a
        /// sequence of accepted PDUs never delivers a byte twice or one past the end.
        #[test]
        fn prop_accepted_data_stays_inside(
            datao in any::<u32>(),
            n in any::<u32>(),
            received in any::<u32>(),
            total in any::<u32>(),
            last in any::<bool>(),
            success in any::<bool>(),
        ) {
            if c2h(datao, last, success).check(n, received, total).is_ok() {
                prop_assert_eq!(datao, received);
                prop_assert!(u64::from(datao) + u64::from(n) <= u64::from(total));
                prop_assert!(!success || datao + n == total);
            }
            if h2c(datao, last).check(n, received, total).is_ok() {
                prop_assert_eq!(datao, received);
                prop_assert!(u64::from(datao) + u64::from(n) <= u64::from(total));
                prop_assert_eq!(last, datao + n == total);
            }
            if r2t(datao, n).check(received, total).is_ok() {
                prop_assert!(n > 0 && datao == received);
                prop_assert!(u64::from(datao) + u64::from(n) <= u64::from(total));
            }
        }

        /// A read split into PDUs at arbitrary points is accepted piece by piece, SUCCESS
        /// on the last one.
        #[test]
        fn prop_a_read_split_anywhere_is_accepted(
            total in 1u32..1 << 20,
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut at: Vec<u32> = cuts.iter().map(|c| c.index(total as usize) as u32).collect();
            at.extend([0, total]);
            at.sort_unstable();
            at.dedup();
            let mut received = 0;
            for w in at.windows(2) {
                let (start, end) = (w[0], w[1]);
                let last = end == total;
                prop_assert_eq!(c2h(start, last, last).check(end - start, received, total), Ok(()));
                prop_assert_eq!(h2c(start, last).check(end - start, received, total), Ok(()));
                received = end;
            }
        }
    }
}
