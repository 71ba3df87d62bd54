import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { tempDir } from '../helpers/tmp.js'
import { withoutPackage } from '../helpers/without-package.js'

const root = join(import.meta.dirname, '..', '..')

const withoutSdk = (args: string[]): ReturnType<typeof withoutPackage> => withoutPackage('@aws-sdk/client-s3', args)

describe('without the optional AWS SDK', () => {
  it("openSnapshotStore('s3://...') fails with TIDEMARK_DFS_CLIENT_MISSING naming what to install; file:// stores work", async () => {
    const dir = tempDir()
    const main = join(dir, 'main.mts')
    await writeFile(main, `
      import { openSnapshotStore } from '${pathToFileURL(join(root, 'src', 'index.ts')).href}'
      const fs = await openSnapshotStore('${pathToFileURL(join(dir, 'snapshots')).href}')
      console.log('file store', fs.capabilities.conditionalPut)
      await openSnapshotStore('s3://bucket/prefix?region=us-east-1').catch((e) => {
        console.log(e.code, e.retriable, e.cause?.code)
        console.log(e.message)
      })
    `)
    const r = await withoutSdk([main])
    expect(r.stderr).toBe('')
    const [fileStore, codes, message] = r.stdout.split('\n')
    expect(fileStore).toBe('file store true')
    expect(codes!.split(' ')).toEqual(['TIDEMARK_DFS_CLIENT_MISSING', 'false', 'ERR_MODULE_NOT_FOUND'])
    expect(message).toBe('s3:// snapshot stores need the AWS SDK, an optional peer dependency of tidemark that is not installed: npm install @aws-sdk/client-s3')
  })

  it('the tidemark command exits 1 with that error on one line', async () => {
    const r = await withoutSdk([join(root, 'src', 'cli', 'main.ts'), 'snapshots', 'list', 's3://bucket/prefix?region=us-east-1', '--job', 'j', '--partition', '0'])
    expect(r.code).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toBe('tidemark: TIDEMARK_DFS_CLIENT_MISSING: s3:// snapshot stores need the AWS SDK, an optional peer dependency of tidemark that is not installed: npm install @aws-sdk/client-s3\n')
  })
})

// tidemark/kafka and tidemark/prometheus take their peer's values from one
// module each (connectors/kafka/kafkajs.ts, connectors/prometheus/prom-client.ts),
// which says what to install; a static import of the peer would fail first,
// with Node's bare module-not-found. npm run test:package checks the same,
// through import and require(), in a fresh app without the peers
// (test/package/pack.package.ts).
describe.each([
  { peer: 'kafkajs', entry: 'tidemark/kafka', dir: 'kafka', code: 'TIDEMARK_KAFKA_CLIENT_MISSING' },
  { peer: 'prom-client', entry: 'tidemark/prometheus', dir: 'prometheus', code: 'TIDEMARK_PROMETHEUS_CLIENT_MISSING' },
])('without the optional $peer', ({ peer, entry, dir: connector, code }) => {
  const message = `${entry} needs ${peer}, an optional peer dependency of tidemark that is not installed: npm install ${peer}`
  const index = join(root, 'connectors', connector, 'index.ts')

  it(`import('${entry}') fails with ${code} naming what to install`, async () => {
    const dir = tempDir()
    const main = join(dir, 'main.mts')
    await writeFile(main, `
      await import('${pathToFileURL(index).href}').catch((e) => {
        console.log(e.code, e.retriable, e.details.package, e.cause?.code)
        console.log(e.message)
      })
    `)
    const r = await withoutPackage(peer, [main])
    expect(r.stderr).toBe('')
    const [codes, said] = r.stdout.split('\n')
    expect(codes!.split(' ')).toEqual([code, 'false', peer, 'MODULE_NOT_FOUND'])
    expect(said).toBe(message)
  })
})
