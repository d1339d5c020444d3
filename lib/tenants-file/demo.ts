import { SANDBOX_MODE, hashKey } from '../keys/api-keys.js'
import type { TenantRegistry } from '../tenants/registry.js'
import type { TenantsFile } from '../../schemas/tenants.js'
import { registryFromJson } from './load.js'

/** The documented sandbox key of the built-in demo tenant: it can never send real mail. */
export const DEMO_SANDBOX_KEY = 'sk_test_DemoSandboxKeyForLocalUseOnly000000000'
/** The demo tenant's restricted sandbox key, for browser pages served from localhost. */
export const DEMO_RESTRICTED_KEY = 'rk_test_DemoRestrictedKeyForLocalhostOnly0000'

/** The tenant served when no TENANTS_FILE is configured. */
export function demoRegistry (): TenantRegistry {
  return registryFromJson({
    tiers: { demo: { allowance: 0, window: '1d', sandboxAllowance: 1000 } },
    tenants: [{
      id: 'demo',
      tier: 'demo',
      brand: { name: 'Email OTP demo' },
      keys: [
        { id: 'demo_secret', kind: 'secret', mode: SANDBOX_MODE, sha256: hashKey(DEMO_SANDBOX_KEY) },
        { id: 'demo_restricted', kind: 'restricted', mode: SANDBOX_MODE, sha256: hashKey(DEMO_RESTRICTED_KEY), origins: ['localhost', '127.0.0.1'] }
      ]
    }]
  } satisfies TenantsFile)
}
