import { DeliveryError, type DeliveryFailureKind } from './transport.js'

/**
 * Reserved recipients that make a sandbox dispatch fail the way a provider can, so partners
 * can test their error handling. `.invalid` can never be a real domain (RFC 2606).
 */
export const SIMULATED_RECIPIENTS: Readonly<Record<string, { outcome: DeliveryFailureKind, description: string }>> = {
  'fail@simulator.invalid': { outcome: 'rejected', description: 'the provider rejects the message: 502 DELIVERY_FAILED, the code is destroyed, nothing is charged' },
  'slow@simulator.invalid': { outcome: 'timeout', description: 'the provider does not answer within MAIL_TIMEOUT_MS: 502 DELIVERY_FAILED after the timeout' },
  'throttled@simulator.invalid': { outcome: 'throttled', description: 'the provider throttles the sender: 502 DELIVERY_FAILED' }
}

/** Plays the reserved recipient's outcome, if the address is one; resolves otherwise. */
export async function simulateDelivery (address: string, timeoutMs: number): Promise<void> {
  const simulated = SIMULATED_RECIPIENTS[address.toLowerCase()]
  if (simulated === undefined) return
  if (simulated.outcome === 'timeout') await new Promise((resolve) => setTimeout(resolve, timeoutMs))
  throw new DeliveryError(simulated.outcome, `sandbox simulator: ${simulated.outcome}`)
}
