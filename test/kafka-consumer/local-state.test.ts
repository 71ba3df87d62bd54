import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import type { AssignmentInfo } from '../../connectors/kafka/consumer/assignor-metadata.js'
import { LocalState } from '../../connectors/kafka/consumer/local-state.js'
import { TransferPriority } from '../../connectors/kafka/consumer/transfer-priority.js'
import { noopLogger } from '../../src/logging/logger.js'

const WAIT_MS = 3000
const P = { topic: 'src', partition: 1 }
const Q = { topic: 'src', partition: 2 }

async function localState(): Promise<LocalState> {
  const stateDir = await mkdtemp(join(tmpdir(), 'tidemark-local-state-'))
  onTestFinished(() => rm(stateDir, { recursive: true, force: true }))
  return new LocalState({
    job: 'job',
    stateDir,
    topics: ['src'],
    logger: noopLogger,
    snapshots: undefined,
    standby: { intervalMs: 500, maxBytesPerSecond: 0, maxDiskBytes: 0 },
    handoff: { snapshot: true, timeoutMs: 10_000, waitMs: WAIT_MS, minEvents: 0 },
    warmup: undefined,
  }, new TransferPriority(), () => undefined)
}

function info(generation: number, orphaned: Array<typeof P> = []): AssignmentInfo {
  return { generation, standbys: [], warmups: [], orphaned, memberId: 'm' }
}

describe('LocalState: how long a new task waits for the previous owner', () => {
  it('an orphan takes its claim at once; any other partition waits handoff.waitMs', async () => {
    const local = await localState()
    local.assigned(info(1, [P]), [P, Q], () => false)
    expect(local.taskStart(P).waitMs).toBe(0)
    expect(local.taskStart(Q).waitMs).toBe(WAIT_MS)
  })

  it('an orphan assigned here again at the next round is still one (the leader saw this member own it)', async () => {
    const local = await localState()
    local.assigned(info(1, [P]), [P], () => false)
    // A kafkajs crash-restart: the member rejoins, advertises P as owned, and the leader orphans nothing.
    local.assigned(info(2), [P], () => false)
    expect(local.taskStart(P).waitMs).toBe(0)
    local.assigned(info(3), [P], () => false)
    expect(local.taskStart(P).waitMs).toBe(0)
  })

  it('the orphan is forgotten once another round may have given it a live owner', async () => {
    const skipped = await localState()
    skipped.assigned(info(1, [P]), [P], () => false)
    // Generation 2 ran without this member: P may have had another owner since.
    skipped.assigned(info(3), [P], () => false)
    expect(skipped.taskStart(P).waitMs).toBe(WAIT_MS)

    const movedAway = await localState()
    movedAway.assigned(info(1, [P]), [P], () => false)
    movedAway.assigned(info(2), [Q], () => false)
    movedAway.assigned(info(3), [P, Q], () => false)
    expect(movedAway.taskStart(P).waitMs).toBe(WAIT_MS)
  })
})
