/**
 * The rule by which every reader of a Kafka log decides, in the same way,
 * which records took effect. It is pure, so that it can be tested without a
 * broker and so that nothing but the records decides it.
 *
 * 1. Duplicates. A record that carries a writer id and a sequence number is
 *    a duplicate when a record with the same pair lies among the `window`
 *    offsets before it. A producer retry can write one record twice; the
 *    copy lands shortly after the original. The window is counted in offsets
 *    and every record counts, so the verdict depends only on the records
 *    within the window: a reader that starts at `from` reads the window
 *    before `from` first (priming) and reaches the same verdicts as a reader
 *    that read everything.
 * 2. Conditions. A record that carries a basis revision `b` takes effect only
 *    if no record that took effect lies strictly between `b` and its own
 *    offset (the design's rule). A reader that starts at `from` knows the
 *    record at `from - 1` took effect (a precondition of read()), which is
 *    all it needs: a basis before it means a conflict.
 * Records without the headers (written by other producers) always take
 * effect, so a plain topic reads as an unconditional log.
 */

export interface RecordMeta {
  offset: bigint
  writer: string | undefined
  seq: bigint | undefined
  /** The revision the record was based on; undefined for an unconditional record. */
  basis: bigint | undefined
}

export class RecordEffectRule {
  readonly window: bigint
  #lastEffective: bigint
  /** `${writer}\0${seq}` -> offset of its latest copy. */
  readonly #seen = new Map<string, bigint>()
  /** The same pairs in offset order, to forget them when they leave the window. */
  #order: Array<{ key: string; offset: bigint }> = []
  #head = 0

  /** `lastEffective` is the record known to have taken effect just before the first one to judge (-1n: none). */
  constructor(lastEffective: bigint, window: number) {
    this.#lastEffective = lastEffective
    this.window = BigInt(window)
  }

  get lastEffective(): bigint {
    return this.#lastEffective
  }

  /** Records a record before the first one to judge, for the duplicate window only. */
  remember(meta: RecordMeta): void {
    this.#forget(meta.offset)
    this.#note(meta)
  }

  /** Whether the record takes effect; records must come in offset order. */
  takesEffect(meta: RecordMeta): boolean {
    this.#forget(meta.offset)
    const duplicate = this.#note(meta)
    if (duplicate) return false
    if (meta.basis !== undefined && !(this.#lastEffective <= meta.basis && meta.basis < meta.offset)) return false
    this.#lastEffective = meta.offset
    return true
  }

  #note(meta: RecordMeta): boolean {
    if (meta.writer === undefined || meta.seq === undefined) return false
    const key = `${meta.writer}\0${meta.seq}`
    const duplicate = this.#seen.has(key)
    this.#seen.set(key, meta.offset)
    this.#order.push({ key, offset: meta.offset })
    return duplicate
  }

  #forget(offset: bigint): void {
    const horizon = offset - this.window
    while (this.#head < this.#order.length && this.#order[this.#head]!.offset < horizon) {
      const { key, offset: at } = this.#order[this.#head]!
      // A later copy of the same pair moved its offset forward; it stays.
      if (this.#seen.get(key) === at) this.#seen.delete(key)
      this.#head += 1
    }
    if (this.#head > 1024 && this.#head * 2 > this.#order.length) {
      this.#order = this.#order.slice(this.#head)
      this.#head = 0
    }
  }
}
