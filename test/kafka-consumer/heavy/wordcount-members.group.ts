// examples/wordcount with two members: slow (the mock takes the group through
// joins that wait out a session timeout), so in npm run test:group.
import { join } from 'node:path'
import { expect, it } from 'vitest'
import { kafkaService } from '../../helpers/services.js'
import { randomName, tempDir } from '../../helpers/tmp.js'
import { member } from '../fixtures/wordcount-member.js'

it('examples/wordcount: a second member names its member id when the group hands it partitions', async () => {
  const dir = tempDir()
  const topic = randomName('wc-lines')
  const common = ['--brokers', kafkaService().brokers.join(','), '--topic', topic, '--job', randomName('wc'), '--store', `file://${join(dir, 'snapshots')}`]
  const first = member([...common, '--state', join(dir, 'state-1'), '--produce', '100'])
  await first.line(/^partition .*fetching from/, 4)
  const second = member([...common, '--state', join(dir, 'state-2')])
  // Its start() can resolve before its first join: the id is printed with its first assignment.
  expect(await second.line(/^member /)).toMatch(/^member (?!undefined)\S+ of group tidemark-\S+ \(pid \d+\): partitions /)
  // Both are SIGKILLed at the end: test/kafka-consumer/wordcount.test.ts tests the hand-off.
})
