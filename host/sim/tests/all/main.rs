//! The judge end to end on the real plant components, with controllers in every form.

mod support;

mod examples;
mod faults;
mod lines;
mod oracle;
mod tables;
