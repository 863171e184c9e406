//! First come, first served: in submission order, every job that fits starts; nothing waits for
//! a job that does not fit, and nothing is preempted. Queue limits still apply.

use super::placement::Planner;
use super::{Actions, Policy};
use crate::engine::world::World;

pub struct Fifo;

impl Policy for Fifo {
    fn cycle(&mut self, world: &World<'_>) -> Actions {
        let mut planner = Planner::new(world);
        let mut actions = Actions::default();
        let mut allocated: Vec<f64> = world.allocated.clone();
        for &job in &world.pending_all {
            if planner.all_full() {
                break;
            }
            let spec = world.spec(job);
            let gpus = spec.gpu_equivalents;
            if world.scenario.queues[spec.queue]
                .limit
                .is_some_and(|limit| allocated[spec.queue] + gpus > limit)
            {
                continue;
            }
            if let Some(nodes) = planner.place(world, job) {
                allocated[spec.queue] += gpus;
                actions.start.push((job, nodes));
            }
        }
        actions
    }
}
