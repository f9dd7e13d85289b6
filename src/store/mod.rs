//! Every statement the library runs, one function per statement, each loading its SQL from
//! `sql/<area>/<name>.sql` and returning typed rows.

pub mod web;
