import { Slots } from '../../util/index.js'
import { resolveBudgetOptions, SHARE_CAP, shareOf, type ResolvedBudgetOptions, type StoreBudgetOptions, type StoreShare } from './budget-options.js'

/**
 * What a store shows its budget. The store implements it with a private
 * object, so that the budget reaches nothing else of it.
 */
export interface BudgetMember {
  /** Grows with every read and commit: the idle check compares it between sweeps. */
  activity(): number
  /**
   * Closes the store's LevelDB (it reopens on the next read or commit) if
   * nothing uses it now and, with `ifActivity`, nothing did since; false
   * when it did not (busy, already closed, closed for good).
   */
  sleep(ifActivity?: number): Promise<boolean>
  /** The share changed (a store joined or left): a value cache follows at once. */
  reshare(share: StoreShare): void
}

interface Member {
  /** Whether its LevelDB is open. */
  open: boolean
  /** Budgeted bytes of the member's LevelDB while it is open (memtable twice and block cache); 0 while closed. */
  levelBytes: number
  seen: number
  since: number
  /** A sleep was asked for and has not settled. */
  releasing: boolean
  /** When it last committed (the budget's clock); -Infinity before its first. */
  wrote: number
  /** It is counted in #writers. */
  writing: boolean
}

/** The budget's part that batchBytes() divides among the stores that write (1/40). */
const WRITERS_PART = 40
/** A store that committed within this long counts as writing (batchBytes). */
const WRITER_WINDOW_MS = 10_000

/**
 * LevelDB writes of a budget's stores in flight at once: 16 per libuv
 * thread, the others wait in order in JavaScript.
 *
 * Why: every LevelDB write runs on libuv's threadpool, and one that finds
 * its memtable full waits there until LevelDB's single background thread
 * (one per process, for every database) has compacted. With hundreds of
 * stores writing, the pool's queue grew to hundreds of writes, and all else
 * that uses the pool waited seconds behind them: the file log's reads and
 * appends, snapshot file reads, the file-system store's writes, and among
 * them a member lease's renewal, which then ran out (issue 38). Fewer than
 * 16 per thread idled the pool while writes waited for their memtables (2 in
 * flight at 1,024 stores committed a fifth of what an unbounded queue did).
 */
const WRITES_IN_FLIGHT = 16 * threadpoolSize()

function threadpoolSize(): number {
  // libuv reads UV_THREADPOOL_SIZE once, at the pool's first use: 4 unless set, at most 1,024.
  const n = Number.parseInt(process.env.UV_THREADPOOL_SIZE ?? '', 10)
  return Number.isSafeInteger(n) && n > 0 ? Math.min(n, 1024) : 4
}

/**
 * One memory and file budget shared by the partition stores of a process
 * (docs/partition-store.md). Each store that opens with it gets an equal
 * share: its value cache follows the share at once as stores come and go;
 * LevelDB's memtable, block cache and max_open_files take effect when a
 * LevelDB opens, so a store opened when the share was larger is closed when
 * the open stores' LevelDB parts exceed the budget, and reopens at the
 * share of the moment on its next read or commit. Stores idle for
 * idleCloseMs are closed the same way, by one timer per budget.
 *
 * Sizes given explicitly to a store (cacheSize, writeBufferSize,
 * valueCacheBytes, maxOpenFiles) win over its share and are not counted.
 */
export class StoreBudget {
  readonly options: ResolvedBudgetOptions
  readonly #members = new Map<BudgetMember, Member>()
  #timer: NodeJS.Timeout | undefined
  #share: StoreShare
  /** Stores that committed within about WRITER_WINDOW_MS: counted at once, uncounted at the next recount. */
  #writers = 0
  #recountAt: number
  /** @internal Slots for the stores' LevelDB writes: a commit writes in one (WRITES_IN_FLIGHT). */
  readonly writes = new Slots(WRITES_IN_FLIGHT)

  constructor(options: StoreBudgetOptions = {}) {
    this.options = resolveBudgetOptions(options)
    this.#share = shareOf(this.options, 1)
    this.#recountAt = this.options.clock() + WRITER_WINDOW_MS
  }

  /**
   * The writes, in bytes, after which a store's commit loop closes its
   * batch (LevelDB puts a whole batch into its memtable, so this is what a
   * writing store's memtable holds): a fortieth of the budget divided among
   * the stores that write now, from the share's writeBufferSize to 4 MiB.
   * Asking counts `member` as writing, so that stores that start together
   * divide it before any has committed; each is sized as it starts (the
   * k-th gets 1/k), so together they take about ln(stores) + 1 fortieths,
   * within the memtables' fifth. One store writing alone on the default
   * budget (a moved partition's replay) gets 4 MiB.
   */
  batchBytes(member: BudgetMember): number {
    this.wrote(member)
    const now = this.options.clock()
    if (now >= this.#recountAt) this.#recount(now)
    const perWriter = Math.floor(this.options.memoryBytes / WRITERS_PART / Math.max(1, this.#writers))
    return Math.min(SHARE_CAP.writeBufferSize, Math.max(this.#share.writeBufferSize, perWriter))
  }

  /** @internal The member committed (it counts as writing until a recount finds it quiet for WRITER_WINDOW_MS). */
  wrote(member: BudgetMember): void {
    const m = this.#members.get(member)
    if (m === undefined) return
    m.wrote = this.options.clock()
    if (!m.writing) {
      m.writing = true
      this.#writers++
    }
  }

  #recount(now: number): void {
    this.#recountAt = now + WRITER_WINDOW_MS
    let writers = 0
    for (const m of this.#members.values()) {
      m.writing = now - m.wrote < WRITER_WINDOW_MS
      if (m.writing) writers++
    }
    this.#writers = writers
  }

  /** The share of each store now. */
  get share(): Readonly<StoreShare> {
    return this.#share
  }

  /** Stores that use this budget (open, whether or not their LevelDB is). */
  get stores(): number {
    return this.#members.size
  }

  /** Budgeted bytes held now: the open LevelDBs' memtables (twice) and block caches, and the value caches' limits. */
  get heldBytes(): number {
    let level = 0
    for (const m of this.#members.values()) level += m.levelBytes
    return level + this.#members.size * this.#share.valueCacheBytes
  }

  /** Stores whose LevelDB is open now. */
  get openStores(): number {
    let open = 0
    for (const m of this.#members.values()) if (m.open) open++
    return open
  }

  /** @internal A store joins before it opens its LevelDB: the share it opens with counts it. */
  join(member: BudgetMember): StoreShare {
    if (!this.#members.has(member)) {
      this.#members.set(member, { open: false, levelBytes: 0, seen: member.activity(), since: this.options.clock(), releasing: false, wrote: -Infinity, writing: false })
      this.#reshare()
      if (this.#timer === undefined && this.options.idleCloseMs > 0) {
        const every = Math.max(1000, Math.floor(this.options.idleCloseMs / 4))
        this.#timer = setInterval(() => void this.closeIdle(), every)
        this.#timer.unref()
      }
    }
    return this.#share
  }

  /** @internal The member's LevelDB opened with `levelBytes` budgeted bytes. */
  opened(member: BudgetMember, levelBytes: number): void {
    const m = this.#members.get(member)
    if (m === undefined) return
    m.open = true
    m.levelBytes = levelBytes
    m.seen = member.activity()
    m.since = this.options.clock()
    this.#enforce(member)
  }

  /** @internal The member's LevelDB closed (idle, or for a checkpoint that reopens it). */
  closedLevel(member: BudgetMember): void {
    const m = this.#members.get(member)
    if (m === undefined) return
    m.open = false
    m.levelBytes = 0
  }

  /** @internal The store closed for good. */
  leave(member: BudgetMember): void {
    if (this.#members.get(member)?.writing === true) this.#writers--
    if (!this.#members.delete(member)) return
    this.#reshare()
    if (this.#members.size === 0 && this.#timer !== undefined) {
      clearInterval(this.#timer)
      this.#timer = undefined
    }
  }

  /**
   * Closes the LevelDB of every store with no read and no commit for
   * idleCloseMs (the budget's timer calls it every quarter of that) and of
   * stores above their share while the budget is exceeded; resolves with
   * how many closed.
   */
  async closeIdle(): Promise<number> {
    const now = this.options.clock()
    const idle = this.options.idleCloseMs
    const sleeps: Array<Promise<boolean>> = []
    for (const [member, m] of this.#members) {
      if (!m.open || m.releasing) continue
      const activity = member.activity()
      if (activity !== m.seen) {
        m.seen = activity
        m.since = now
      } else if (idle > 0 && now - m.since >= idle) {
        sleeps.push(this.#sleep(member, m, activity))
      }
    }
    const refits = this.#enforce(undefined)
    const done = await Promise.all([...sleeps, ...refits])
    return done.filter(Boolean).length
  }

  #sleep(member: BudgetMember, m: Member, ifActivity: number | undefined): Promise<boolean> {
    m.releasing = true
    return member.sleep(ifActivity).then((slept) => slept, () => false).finally(() => { m.releasing = false })
  }

  /**
   * While the open LevelDBs hold more than the budget leaves them, the
   * stores opened with more than today's share close (least recently
   * active first); `except` just opened. Stores at the floors never do:
   * there the floors set the total.
   */
  #enforce(except: BudgetMember | undefined): Array<Promise<boolean>> {
    const share = this.#share
    const fair = 2 * share.writeBufferSize + share.cacheSize
    const room = this.options.memoryBytes - this.#members.size * share.valueCacheBytes
    let held = 0
    const over: Array<[BudgetMember, Member]> = []
    for (const [member, m] of this.#members) {
      if (m.releasing) continue
      held += m.levelBytes
      if (member !== except && m.levelBytes > fair) over.push([member, m])
    }
    if (held <= room) return []
    over.sort((a, b) => a[1].since - b[1].since)
    const sleeps: Array<Promise<boolean>> = []
    for (const [member, m] of over) {
      if (held <= room) break
      held -= m.levelBytes
      sleeps.push(this.#sleep(member, m, undefined))
    }
    return sleeps
  }

  #reshare(): void {
    this.#share = Object.freeze(shareOf(this.options, this.#members.size))
    for (const member of this.#members.keys()) member.reshare(this.#share)
  }
}

let processDefault: StoreBudget | undefined

/**
 * The budget of the stores opened without one: one per process, made on
 * first use with the default options. The only state Tidemark keeps per
 * process; pass `budget` to a store (or the runtimes' `store.budget`) to use
 * another.
 */
export function defaultStoreBudget(): StoreBudget {
  processDefault ??= new StoreBudget()
  return processDefault
}
