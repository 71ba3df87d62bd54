// One member of a group bench in its own process (bench/_group.ts), so that
// it can be SIGKILLed. argv: shared spec (JSON), member spec (JSON). Prints
// one JSON line per event on stdout; SIGTERM closes it.
import { FsSnapshotStore } from '../src/snapshot-store/fs-store.js'
import { memberConsumer, type MemberSpec, type SharedSpec } from './_group.js'

const shared = JSON.parse(process.argv[2]!) as SharedSpec
const spec = JSON.parse(process.argv[3]!) as MemberSpec
const say = (line: object): void => { process.stdout.write(`${JSON.stringify(line)}\n`) }
const consumer = memberConsumer(shared, spec, new FsSnapshotStore({ root: shared.snapshotRoot }), say)
if (spec.holdStart === true) {
  // Loaded (tsx compiled the sources): start() waits for the bench's go on stdin, so that members start together.
  say({ t: 'loaded' })
  await new Promise<void>((resolve) => { process.stdin.once('data', () => resolve()) })
}
say({ t: 'starting', at: performance.timeOrigin + performance.now(), member: spec.name })
await consumer.start()
say({ t: 'ready' })
process.on('SIGTERM', () => { void consumer.close().then(() => process.exit(0)) })
