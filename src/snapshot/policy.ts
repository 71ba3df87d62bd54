/**
 * Compact points. An incremental snapshot references files in objects of
 * earlier snapshots; as LevelDB compacts, fewer and fewer files of an old
 * object stay live, but the whole object must be kept, and a restore has to
 * visit more objects. A full snapshot (every file uploaded again) resets
 * both. It is written when:
 *
 *  - there is no earlier snapshot to build on (first), the caller asks for
 *    one (requested), or no file of the kept snapshots is still live
 *    (nothing-shared: the snapshot is full without being asked);
 *  - amplification: the objects the new snapshot would reference (old ones
 *    plus its own new data) add up to more than `maxAmplification` times the
 *    live state;
 *  - chain length: the new snapshot would reference objects of more than
 *    `maxChainLength` snapshots (itself included).
 */
export type FullReason = 'first' | 'requested' | 'nothing-shared' | 'amplification' | 'chain-length'

export interface CompactionInput {
  forceFull: boolean
  hasParent: boolean
  stateBytes: number
  /** Size of the data objects an incremental snapshot would upload. */
  newBytes: number
  /** Objects an incremental snapshot would reference (with repeats, one per file). */
  referenced: ReadonlyArray<{ key: string; size: number }>
  maxAmplification: number
  maxChainLength: number
}

export interface CompactionDecision {
  full: boolean
  reason?: FullReason
  amplification: number
  chainLength: number
}

export function planCompaction(input: CompactionInput): CompactionDecision {
  const objects = new Map<string, number>()
  for (const o of input.referenced) objects.set(o.key, o.size)
  // Data keys are data/<snapshot id>-<token>-<n>.tar: one snapshot may have written several.
  const snapshots = new Set([...objects.keys()].map((k) => k.slice('data/'.length, 'data/'.length + 23)))
  const chainLength = snapshots.size + (input.newBytes > 0 ? 1 : 0)
  const retainedBytes = [...objects.values()].reduce((a, b) => a + b, 0) + input.newBytes
  const amplification = retainedBytes / Math.max(input.stateBytes, 1)
  const decide = (reason: FullReason | undefined): CompactionDecision => (reason === undefined ? { full: false, amplification, chainLength } : { full: true, reason, amplification, chainLength })
  if (input.forceFull) return decide('requested')
  if (!input.hasParent) return decide('first')
  if (objects.size === 0) return decide('nothing-shared')
  if (amplification > input.maxAmplification) return decide('amplification')
  if (chainLength > input.maxChainLength) return decide('chain-length')
  return decide(undefined)
}
