import { asTidemarkError, isTidemarkError, type TidemarkError } from '../errors.js'
import type { Claim } from '../ownership/claim.js'
import { ASSIGNED_LOOK_VALID_MS } from '../ownership/assigned.js'
import type { ClaimPolicy, OwnershipEvent } from './partition-lifecycle.js'

/** How often an assigned owner looks at its claim (one HEAD) while it processes. */
const CLAIM_CHECK_MS = 1000

/** How long a commit waits for a look at its assigned claim while the store cannot answer. */
const LOOK_RETRY_MS = 30_000

/**
 * Keeps a partition's claim while its owner processes, by the claim's
 * policy: a lease of its own renewed on a timer; a process's member lease
 * (the claim itself is looked at only after another process marked that
 * lease run out); or an assigned claim, looked at in the background once a
 * second. Before each batch commit, beforeCommit() says whether the owner
 * may still commit.
 */
export class ClaimKeeper {
  readonly claim: Claim
  readonly #policy: ClaimPolicy
  readonly #lost: (error: unknown) => void
  readonly #event: (event: OwnershipEvent) => void
  #renewTimer: NodeJS.Timeout | undefined
  #renewing = false
  #checking = false
  #checkedAt = performance.now()
  /** When the last look that found the claim unchanged started (the acquire counts as one). */
  #goodLookAt = performance.now()
  /** A look at an assigned claim (or holdsClaim()) found it taken. */
  #lostFound: TidemarkError | undefined
  /** The member lease's expirations when the claim was last looked at (or taken). */
  #expirationsSeen: number

  constructor(claim: Claim, policy: ClaimPolicy, on: { lost(error: unknown): void; event(event: OwnershipEvent): void }) {
    this.claim = claim
    this.#policy = policy
    this.#lost = on.lost
    this.#event = on.event
    this.#expirationsSeen = policy.kind === 'lease' ? policy.memberLease?.expirations ?? 0 : 0
    // A claim held by the process's member lease, or assigned, is renewed by nobody.
    if (policy.kind === 'lease' && policy.memberLease === undefined) {
      this.#renewTimer = setInterval(() => void this.#renew(), claim.renewIntervalMs)
      // The lease must not keep a process alive that has nothing else to do.
      this.#renewTimer.unref()
    }
  }

  async #renew(): Promise<void> {
    const claim = this.claim
    // A slow store must not pile up renewals; the next tick tries again.
    if (this.#renewing || claim.state !== 'held') return
    this.#renewing = true
    try {
      await claim.renew()
    } catch (error) {
      if (isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST')) this.#lost(error)
      else this.#event({ type: 'renew-failed', error: asTidemarkError(error, 'TIDEMARK_DFS_REQUEST_FAILED', 'renewing the claim failed', { retriable: true }), leaseUntil: claim.leaseUntil })
    } finally {
      this.#renewing = false
    }
  }

  /**
   * Before each batch commit. With a lease of its own, nothing is committed
   * once it has run out by this host's clock without a renewal: another
   * owner may hold the partition then, and only a renewal that succeeds now
   * proves it does not. With a member lease, the same for the process's
   * lease, and the claim is looked at too once a write of the lease found
   * another process's mark on it (its expirations grew). An assigned
   * claim is looked at in the background, at most once per CLAIM_CHECK_MS;
   * the batch after a look found it taken fails, and a batch commits only
   * while the last look that found it unchanged started at most
   * ASSIGNED_LOOK_VALID_MS ago (else it waits for a look now): a new
   * assignee takes a claim by force only that long and more after it
   * marked it (assigned.ts), so nothing is committed after the force.
   */
  beforeCommit(): Promise<void> | undefined {
    if (this.#lostFound !== undefined) {
      this.#lost(this.#lostFound)
      throw this.#lostFound
    }
    const { claim } = this
    const policy = this.#policy
    if (policy.kind === 'assigned') {
      if (performance.now() - this.#goodLookAt > ASSIGNED_LOOK_VALID_MS) return this.#guard(this.#look())
      this.#checkInBackground()
      return undefined
    }
    const member = policy.memberLease
    if (member !== undefined) {
      if (!member.expired && member.expirations === this.#expirationsSeen) return undefined
      return this.#guard((async () => {
        await member.ensureLive()
        // Renewed without finding a taker's mark: no claim was taken by the
        // lease's expiry (member-lease.ts), and none is looked at.
        const expirations = member.expirations
        if (expirations === this.#expirationsSeen) return
        await claim.check()
        this.#expirationsSeen = expirations
      })())
    }
    if (claim.leaseUntil === null || policy.clock() < claim.leaseUntil) return undefined
    return this.#guard(claim.renew())
  }

  #guard(check: Promise<void>): Promise<void> {
    return check.catch((error: unknown) => {
      if (isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST')) this.#lost(error)
      throw error
    })
  }

  #checkInBackground(): void {
    const now = performance.now()
    if (this.#checking || now - this.#checkedAt < CLAIM_CHECK_MS) return
    this.#checking = true
    this.#checkedAt = now
    this.#lookOnce().catch(() => undefined).finally(() => {
      this.#checking = false
    })
  }

  /** One look at the claim (a HEAD): unchanged, it vouches for commits from when it started; taken, it is kept in #lostFound. */
  async #lookOnce(): Promise<void> {
    const started = performance.now()
    try {
      await this.claim.check()
    } catch (error) {
      if (isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST')) this.#lostFound = error
      throw error
    }
    this.#goodLookAt = Math.max(this.#goodLookAt, started)
  }

  /**
   * A look now, before a commit: the last good one is too old to vouch for
   * it. A store that cannot answer is asked again with backoff (the commit
   * waits: nothing is committed without a recent look) for up to
   * LOOK_RETRY_MS, then the commit fails with the store's error.
   */
  async #look(): Promise<void> {
    const first = performance.now()
    for (let wait = 100; ; wait = Math.min(wait * 2, 5000)) {
      try {
        await this.#lookOnce()
        return
      } catch (error) {
        if (isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST') || performance.now() - first + wait > LOOK_RETRY_MS) throw error
      }
      await new Promise((resolve) => setTimeout(resolve, wait))
    }
  }

  /**
   * Looks at the claim now (one HEAD): false when another owner took it;
   * true while this owner holds it, or when the store cannot tell now.
   */
  async holds(): Promise<boolean> {
    try {
      await this.#lookOnce()
      return true
    } catch (error) {
      return !isTidemarkError(error, 'TIDEMARK_OWNERSHIP_LOST')
    }
  }

  /** What a look at the claim found: another owner's claim, or undefined. */
  get lostFound(): TidemarkError | undefined {
    return this.#lostFound
  }

  /** Stops renewing (the shutdown). */
  stop(): void {
    if (this.#renewTimer !== undefined) clearInterval(this.#renewTimer)
    this.#renewTimer = undefined
  }
}
