import { execFile } from 'node:child_process'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { tempDir } from '../helpers/tmp.js'

const run = promisify(execFile)
const root = join(import.meta.dirname, '..', '..')
const connector = pathToFileURL(join(root, 'connectors', 's3', 'index.ts')).href
// The scripts live in a temp folder, outside this package's node_modules.
const sdk = import.meta.resolve('@aws-sdk/client-s3')

/** Runs a module in a fresh Node process (through tsx) and returns its stderr. */
async function stderrOf(source: string, env: NodeJS.ProcessEnv = {}): Promise<string> {
  const file = join(tempDir('tidemark-warn-'), 'main.ts')
  await writeFile(file, source)
  const { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: _, ...inherited } = process.env
  const { stderr } = await run(process.execPath, ['--import', 'tsx', file], { cwd: root, env: { ...inherited, ...env } })
  return stderr
}

// The SDK prints its NodeVersionSupportWarning on Node.js below 22 only; on
// 22 and 24 these tests still check that nothing else is hidden.
const sdkWarns = Number(process.versions.node.split('.')[0]) < 22

describe("the AWS SDK's Node-version warning", () => {
  it('is not printed when Tidemark constructs its S3 client, and the environment is left as it was', async () => {
    const stderr = await stderrOf(`
      import { S3SnapshotStore } from '${connector}'
      new S3SnapshotStore({ bucket: 'quiet-sdk', region: 'us-east-1' })
      console.error('switch after:', process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED)
    `)
    expect(stderr).not.toContain('NodeVersionSupportWarning')
    expect(stderr).toContain('switch after: undefined')
  })

  it('is the only warning kept out: the program\'s own warnings still reach stderr', async () => {
    const stderr = await stderrOf(`
      import { S3SnapshotStore } from '${connector}'
      new S3SnapshotStore({ bucket: 'quiet-sdk', region: 'us-east-1' })
      process.emitWarning('a warning of the program', 'ProgramWarning')
    `)
    expect(stderr).toContain('ProgramWarning: a warning of the program')
    expect(stderr).not.toContain('NodeVersionSupportWarning')
  })

  it('is printed for a plain S3Client of the same SDK below Node.js 22, and not at all from 22 on (the test sees the warning it suppresses)', async () => {
    const stderr = await stderrOf(`
      import { S3Client } from '${sdk}'
      new S3Client({ region: 'us-east-1' })
    `)
    expect(stderr.includes('NodeVersionSupportWarning')).toBe(sdkWarns)
  })

  it('a user who set the SDK switch to false keeps the warning (where the SDK prints one)', async () => {
    const stderr = await stderrOf(`
      import { S3SnapshotStore } from '${connector}'
      new S3SnapshotStore({ bucket: 'quiet-sdk', region: 'us-east-1' })
    `, { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'false' })
    expect(stderr.includes('NodeVersionSupportWarning')).toBe(sdkWarns)
  })
})
