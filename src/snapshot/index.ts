/** The snapshot layer's door for the connectors and the layers above: its public API and what they need besides. */
export * from './public.js'
export { listVerifiedManifests, type VerifiedManifests } from './catalog.js'
export { layoutOfOption, SNAPSHOT_ID } from './layout.js'
export { pacedStore } from './follow-rate.js'
