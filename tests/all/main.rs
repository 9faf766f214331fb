//! Cross-crate suites: the WIT contracts as a whole, and (as the daemon lands) the
//! daemon driven end to end by our client and the published Python client.

mod wit;
