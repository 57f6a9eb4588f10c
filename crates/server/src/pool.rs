//! Opening a model's paged KV pool, for the engine (the target's) and for a pooled draft
//! model ([`DraftModel::pooled`](crate::draft::DraftModel::pooled)).

use kindle_generate::PagedModel;

use crate::error::ServerError;

/// Make `model`'s KV pool of `blocks` blocks of `block_size` tokens for `sequences`
/// sequences at once, unless it has that pool already ([`run`](crate::run) makes it before
/// binding its address).
pub fn open_pool<M: PagedModel>(
    model: &mut M,
    blocks: usize,
    block_size: usize,
    sequences: usize,
) -> Result<(), ServerError> {
    let open = model.pool_stats();
    if open.is_some_and(|s| s.total == blocks && s.block_size == block_size && s.used == 0) {
        return Ok(());
    }
    model
        .open_pool(blocks, block_size, sequences)
        .map_err(|e| ServerError::Pool {
            blocks,
            block_size,
            message: e.to_string(),
        })
}
