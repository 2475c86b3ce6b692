//! Simulated environments after SWE-World: a transition model (SWT) answers the commands that
//! run Python or tests, a reward model (SWR) grades the final patch, and a router decides per
//! command between real and simulated execution, measuring how far the simulation drifts from
//! reality wherever both are available.

// sim modules
pub mod classify;
pub mod drift;
pub mod route;
pub mod sim;
