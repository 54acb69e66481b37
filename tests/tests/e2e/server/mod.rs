//! The server on its own: blobs, publishing, resolve, TLS, hostile and forged input, key rotation
//! and keyring pushes, revocation.

mod attacks;
mod blobs;
mod census;
mod floods;
mod hostile;
mod key_rotation;
mod keyring_push;
mod ops_access;
mod proxies;
mod publish;
mod resolve;
mod revocation;
mod shapes;
mod signers;
mod tls;
