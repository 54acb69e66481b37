//! Trust: what the client believes and why. Verifying a resolve answer and its release before
//! anything is downloaded ([`verify`]), what a verified answer asks to record (`record`, pure), and time the device can trust: the server's signed time
//! carried on the boot clock (`timekeeping`) and learned before anything needs it
//! (`timesync`).

pub(crate) mod record;
pub(crate) mod timekeeping;
pub(crate) mod timesync;
pub mod verify;
