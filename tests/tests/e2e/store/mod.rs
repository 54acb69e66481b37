//! Object stores: the conformance suite on every backend, S3 (moto) replicas, formats written by
//! earlier versions, integrity after crashes, outages.

mod conformance;
mod formats;
mod integrity;
mod outage;
mod s3;
