//! Scaling on paper: a ring all-reduce cost model (filled in below).
