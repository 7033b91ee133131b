//! Policy engine (DESIGN §6). OWNER: policy helper.
