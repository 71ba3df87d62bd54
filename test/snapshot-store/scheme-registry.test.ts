import { describe, expect, it } from 'vitest'
// Only the package's root: the S3 connector is not imported by this file.
import { openSnapshotStore } from '../../src/index.js'

describe('snapshot store schemes', () => {
  it('an s3:// URL loads the S3 connector, which registers its scheme, with no set-up call', async () => {
    const store = await openSnapshotStore('s3://bucket-1/prefix?region=us-east-1')
    expect(store.constructor.name).toBe('S3SnapshotStore')
    expect(store.url).toBe('s3://bucket-1/prefix?region=us-east-1')
    await store.close()
  })
})
