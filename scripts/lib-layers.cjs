'use strict'

/*
 * The layers `npm run lint` holds the imports to (docs/architecture.md#layers).
 *
 * Outside lib/: server.ts and cli/ run the service, app.ts assembles it from plugins/ and
 * routes/, which call lib/ and schemas/; schemas/ imports nothing of the service, and no
 * production file imports test/ or bench/.
 *
 * Inside lib/, from the bottom up: a unit (a folder, or a file directly in lib/) imports only
 * units of lower layers. Units of one layer never import each other, so no two units can import
 * each other and no import runs back up. A new folder has to be placed here before it imports
 * or is imported (lib-unplaced in .dependency-cruiser.cjs).
 *
 * lib/state/ is the storage the domain builds on, and a layer below it: its ports (lib/state/*.ts)
 * are the interfaces the domain uses, its adapters (lib/state/memory/, lib/state/redis/)
 * implement them, and lib/state/index.ts chooses the adapters. Nothing outside lib/state/
 * imports an adapter, nothing outside lib/state/redis/ imports ioredis or the key names
 * (lib/state/redis/keys.ts), and the domain objects over the stores (the admission gate) are
 * built above it, in lib/compose.ts.
 *
 * Mail is two units: lib/mail/delivery/ (the mailer, its transports) below lib/mail/templating/,
 * whose composed message is the OutgoingMessage delivery sends. The pieces a template rendered
 * around the code (lib/code-pieces.ts) sit at the bottom: templating makes them, and delivery
 * and the sandbox inbox's ports and adapters pass them on without knowing what they are.
 */
const LIB_LAYERS = [
  ['lib/duration.ts', 'lib/json-position.ts', 'lib/code-pieces.ts', 'lib/random-ids.ts', 'lib/errors.ts', 'lib/store-errors.ts', 'lib/manifest.ts', 'lib/keys', 'lib/limits', 'lib/fairness', 'lib/lru', 'lib/net', 'lib/captcha', 'lib/recipients'],
  ['lib/telemetry'],
  ['lib/state/*.ts'],
  ['lib/state/memory', 'lib/state/redis'],
  ['lib/state/index.ts'],
  ['lib/mail/delivery'],
  ['lib/mail/templating'],
  ['lib/tenants'],
  ['lib/quota', 'lib/receipts', 'lib/webhooks', 'lib/sandbox', 'lib/previews'],
  ['lib/feedback', 'lib/reputation'],
  ['lib/admission', 'lib/tenants-file'],
  ['lib/config'],
  ['lib/otp'],
  ['lib/compose.ts']
]

const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

/** The paths of a unit: a file, the ports (the files of lib/state/ but its index), or a folder. */
function unitPath (unit) {
  if (unit === 'lib/state/*.ts') return '^lib/state/(?!index\\.ts$)[^/]+$'
  if (unit.endsWith('.ts')) return `^${escape(unit)}$`
  return `^${escape(unit)}/`
}

const anyOf = (units) => units.map(unitPath).join('|')

module.exports = { LIB_LAYERS, unitPath, anyOf }
