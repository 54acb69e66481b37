//! The server on its own: blobs, publishing, resolve, TLS, hostile and forged input, key rotation
//! and keyring pushes, revocation, the inspector against the exporter, evaluation.

mod attacks;
mod blobs;
mod evaluate;
mod hostile;
mod inspector_ground_truth;
mod key_rotation;
mod keyring_push;
mod publish;
mod resolve;
mod revocation;
mod tls;
