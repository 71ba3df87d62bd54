export { acquireClaim, readClaim, Claim, CLAIM_DEFAULTS } from './claim.js'
export type { AcquireClaimOptions, ClaimTakeover, StoredClaim } from './claim.js'
export { CLAIM_FORMAT } from './record.js'
export type { ClaimRecord, ClaimOwner } from './record.js'
