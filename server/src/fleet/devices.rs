//! Distinct devices: the hash an install id (or an address prefix) is counted and limited
//! under, and the mergeable estimator that counts them. The bottom of `fleet`: imports
//! nothing of the crate.
//!
//! The hash is stored: every sketch a replica flushes holds hashed install ids, merged with
//! other replicas' sketches and with those of earlier runs. So it is pinned to one algorithm,
//! SipHash-1-3 with zero keys over the bytes below, through a crate that promises it
//! (`siphasher`), never `std`'s `DefaultHasher`, whose output may change between Rust releases
//! (replicas built by two toolchains would count one device twice). These are the values
//! `DefaultHasher` gave for the same input up to Rust 1.95, so sketches stored by earlier
//! versions stay comparable: no migration.

use std::hash::Hasher as _;

use cardinality_estimator::CardinalityEstimator;
use siphasher::sip::SipHasher13;

/// Distinct devices, as a mergeable estimator over the hashed install id.
pub type Devices = CardinalityEstimator<u64>;

/// The hash of an address prefix (a rate-limit key): the prefix's length as 8 little-endian
/// bytes, then its bytes.
pub(crate) fn hash_id_bytes(b: &[u8]) -> u64 {
    let mut h = SipHasher13::new_with_keys(0, 0);
    h.write(&(b.len() as u64).to_le_bytes());
    h.write(b);
    h.finish()
}

/// The hash of an install id (a rate-limit key, and what [`Devices`] count): its UTF-8 bytes,
/// then one byte 0xff.
pub(crate) fn hash_id(s: &str) -> u64 {
    let mut h = SipHasher13::new_with_keys(0, 0);
    h.write(s.as_bytes());
    h.write(&[0xff]);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values computed by the earlier implementation (`DefaultHasher` under Rust 1.95): a
    /// change here would make every stored sketch count its devices again.
    #[test]
    fn install_id_hashes_are_pinned_to_what_stored_sketches_hold() {
        for (id, want) in [
            ("", 0x3040_6ea5_23c5_3def_u64),
            ("install-1", 0x9c3e_bea0_86ca_e9a0),
            (
                "a7f3c9e0-1b2d-4e5f-8a9b-0c1d2e3f4a5b",
                0x2eaf_8419_32cf_a44e,
            ),
            ("ünïcödé", 0x0068_0bbd_8d68_7820),
        ] {
            assert_eq!(hash_id(id), want, "{id:?}");
        }
    }

    #[test]
    fn address_prefix_hashes_are_pinned() {
        for (prefix, want) in [
            (&b""[..], 0xbd60_acb6_58c7_9e45_u64),
            (&b"\x0a\x00\x00"[..], 0x396a_ccc7_7dcb_6782),
            (
                &[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0][..],
                0xa4bb_4a88_d57d_a638,
            ),
        ] {
            assert_eq!(hash_id_bytes(prefix), want, "{prefix:?}");
        }
    }

    #[test]
    fn a_device_counted_by_two_replicas_is_one_device() {
        let (mut a, mut b) = (Devices::default(), Devices::default());
        a.insert(&hash_id("phone-1"));
        b.insert(&hash_id("phone-1"));
        b.insert(&hash_id("phone-2"));
        a.merge(&b);
        assert_eq!(a.estimate(), 2);
    }
}
